package fp8

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refMX returns the E8M0 code and element codes of one MX block, from the
// definition in float64: X = floor(log2(amax)) - emax from math.Frexp,
// clamped to [-127, 127].
func refMX(run []float32, f Format) (byte, []byte) {
	out := make([]byte, len(run))
	a := float64(refAmax(run))
	switch {
	case math.IsNaN(a) || math.IsInf(a, 0):
		for i := range out {
			out[i] = f.NaN()
		}
		return 0xff, out
	case a == 0:
		for i, x := range run {
			out[i] = f.Encode(x)
		}
		return 127, out
	}
	_, e := math.Frexp(a)
	x := min(max(e-1-f.EmaxElem(), -127), 127)
	mul := float32(math.Ldexp(1, -x))
	for i, v := range run {
		out[i] = f.Encode(refProduct(v, mul))
	}
	return byte(x + 127), out
}

func TestCastMX(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, f := range []Format{E4M3, E5M2} {
		for _, n := range []int{1, 31, 32, 33, 1000, 3*parallelMin + 9} {
			t.Run(fmt.Sprintf("%v/n=%d", f, n), func(t *testing.T) {
				src := specialSlice(r, n)
				withSpecialBlocks(src, MXBlock, 2)
				// A block of float32 subnormals (X clamps to -127) and one
				// whose amax saturates after scaling (mantissa above 1.75).
				for k, v := range map[int]float32{6: 0x1p-140, 7: 0x1.fffffep3} {
					for i := k * MXBlock; i < min((k+1)*MXBlock, n); i++ {
						src[i] = v * float32(1-2*(i&1))
					}
				}
				nb := (n + MXBlock - 1) / MXBlock
				dst, all := guarded(n)
				scales, sall := guarded(nb)
				CastMX(dst, scales, src, f)
				checkGuards(t, all, n)
				checkGuards(t, sall, nb)
				for k := range nb {
					lo, hi := k*MXBlock, min((k+1)*MXBlock, n)
					ws, wd := refMX(src[lo:hi], f)
					if scales[k] != ws {
						t.Fatalf("block %d: scale %#02x, want %#02x", k, scales[k], ws)
					}
					for i := range wd {
						if dst[lo+i] != wd[i] {
							t.Fatalf("block %d elem %d (%g): %#02x, want %#02x", k, i, src[lo+i], dst[lo+i], wd[i])
						}
					}
				}
			})
		}
	}
}

func TestCastMXEdges(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	cases := []struct {
		name  string
		src   []float32
		scale byte
		codes []byte
	}{
		{"all zero", []float32{0, negZero, 0}, 127, []byte{0, 0x80, 0}},
		{"NaN", []float32{1, float32(math.NaN())}, 0xff, []byte{E4M3NaN, E4M3NaN}},
		{"Inf", []float32{float32(math.Inf(1)), 2}, 0xff, []byte{E4M3NaN, E4M3NaN}},
		{"one element", []float32{1}, 127 - 8, []byte{0x78}},    // 1 * 2^8 = 256
		{"saturates", []float32{1.9375}, 127 - 8, []byte{0x7e}}, // 496 -> 448
		{"max float32", []float32{math.MaxFloat32}, 127 + 127 - 8, []byte{0x7e}},
		// X = -149-8 clamps to -127; 2^-149 * 2^127 = 2^-22 is below half of
		// E4M3's smallest subnormal 2^-9, so the element encodes to 0.
		{"smallest float32 subnormal", []float32{0x1p-149}, 0, []byte{0x00}},
		{"clamped exponent keeps a subnormal", []float32{0x1p-136}, 0, []byte{0x01}}, // 2^-136 * 2^127 = 2^-9
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]byte, len(c.src))
			scales := make([]byte, 1)
			CastMX(dst, scales, c.src, E4M3)
			if scales[0] != c.scale || string(dst) != string(c.codes) {
				t.Errorf("CastMX(%v) = scale %#02x codes %x, want %#02x %x", c.src, scales[0], dst, c.scale, c.codes)
			}
		})
	}
}

func TestE8M0Value(t *testing.T) {
	for e := range 256 {
		got := E8M0Value(uint8(e))
		if e == 255 {
			if got == got {
				t.Errorf("E8M0Value(0xff) = %g, want NaN", got)
			}
			continue
		}
		if want := math.Ldexp(1, e-127); float64(got) != want {
			t.Errorf("E8M0Value(%d) = %g, want %g", e, got, want)
		}
	}
}
