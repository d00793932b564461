package fp8

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// guard is the byte written around output buffers to catch writes past
// their ends.
const guard = 0xa5

// guarded returns a buffer of n bytes inside guard bands of 16 bytes.
func guarded(n int) (buf, all []byte) {
	all = make([]byte, n+32)
	for i := range all {
		all[i] = guard
	}
	return all[16 : 16+n : 16+n], all
}

// checkGuards reports a write outside the middle n bytes of all.
func checkGuards(t *testing.T, all []byte, n int) {
	t.Helper()
	for i, b := range all {
		if (i < 16 || i >= 16+n) && b != guard {
			t.Fatalf("write past the buffer at offset %d", i-16)
		}
	}
}

// refProduct is float32(x*scale) computed as the exact float64 product
// rounded once to float32.
func refProduct(x, scale float32) float32 { return float32(float64(x) * float64(scale)) }

// specialSlice returns n values mixing random ones with zeros, -0, ±Inf,
// NaN, values near Max and subnormals, and ties of the subnormal ranges
// (half the smallest subnormal, 1.5 and 2.5 of it, the tie below the
// smallest normal of E4M3).
func specialSlice(r *rand.Rand, n int) []float32 {
	s := randomSlice(r, n)
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 448, -464, 57344, 61440, 0x1p-9, 0x1p-149, math.MaxFloat32,
		0x1p-10, -0x1p-17, 0x1.8p-9, -0x1.4p-15, 0x1.ep-7, 480, -0x1.0001p-10}
	for i := range s {
		if r.IntN(16) == 0 {
			s[i] = specials[r.IntN(len(specials))]
		}
	}
	return s
}

func TestCastScaled(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, f := range []Format{E4M3, E5M2} {
		for _, n := range []int{0, 1, 7, 1000, parallelMin + 3, 5*parallelMin + 1} {
			for _, scale := range []float32{1, 0.3, 1234.5, 0x1p-100} {
				t.Run(fmt.Sprintf("%v/n=%d/scale=%g", f, n, scale), func(t *testing.T) {
					src := specialSlice(r, n)
					orig := slices.Clone(src)
					dst, all := guarded(n)
					amax := CastScaled(dst, src, scale, f)
					checkGuards(t, all, n)
					if !slices.EqualFunc(src, orig, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
						t.Fatal("src modified")
					}
					if want := refAmax(src); math.Float32bits(amax) != math.Float32bits(want) {
						t.Errorf("amax = %g, want %g", amax, want)
					}
					for i, x := range src {
						if want := f.Encode(refProduct(x, scale)); dst[i] != want {
							t.Fatalf("dst[%d] = %#02x for %g, want %#02x", i, dst[i], x, want)
						}
					}
				})
			}
		}
	}
}

func TestDequantize(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, f := range []Format{E4M3, E5M2} {
		for _, n := range []int{0, 256, parallelMin + 5} {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i) ^ byte(r.IntN(256))
			}
			dst := make([]float32, n)
			const inv = 0.375
			Dequantize(dst, src, inv, f)
			for i, b := range src {
				want := refProduct(f.Decode(b), inv)
				if math.Float32bits(dst[i]) != math.Float32bits(want) && !(dst[i] != dst[i] && want != want) {
					t.Fatalf("%v: dst[%d] = %g, want %g", f, i, dst[i], want)
				}
			}
		}
	}
}

func TestCastPanics(t *testing.T) {
	for name, fn := range map[string]func(){
		"CastScaled short dst": func() { CastScaled(make([]byte, 1), make([]float32, 2), 1, E4M3) },
		"CastScaled format":    func() { CastScaled(nil, nil, 1, 0) },
		"Dequantize short dst": func() { Dequantize(make([]float32, 1), make([]byte, 2), 1, E5M2) },
	} {
		if !panics(fn) {
			t.Errorf("%s: no panic", name)
		}
	}
}
