package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// testValues returns n float32 values that exercise the conversions: random
// bit patterns (NaNs with payloads included), normally distributed values
// over 40 binades, special values, and exact midpoints between neighbouring
// FP8 values (the ties of round-to-nearest-even).
func testValues(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 2))
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00000), math.Float32frombits(0xffc00001), math.Float32frombits(0x7f800001),
		448, -448, 464, -464, 480, 57344, -57344, 61440, 0x1p-10, -0x1p-10, 0x1p-17, -0x1p-17,
		math.Float32frombits(1), math.Float32frombits(0x807fffff), math.MaxFloat32, -math.MaxFloat32}
	v := make([]float32, n)
	for i := range v {
		switch r.IntN(4) {
		case 0:
			v[i] = math.Float32frombits(r.Uint32())
		case 1:
			v[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(40)-20))
		case 2:
			v[i] = specials[r.IntN(len(specials))]
		default:
			f := fp8.E4M3
			if r.IntN(2) == 0 {
				f = fp8.E5M2
			}
			c := byte(r.IntN(255))
			a, b := f.Decode(c), f.Decode(c+1)
			if m := (a + b) / 2; !math.IsNaN(float64(m)) && !math.IsInf(float64(m), 0) {
				v[i] = m
			}
		}
	}
	return v
}

// guard is the byte written around every output to catch writes past its
// ends.
const (
	guard    = 0xa5
	guardLen = 64
)

// guarded is a device output with guard bands: [guard][data][guard].
type guarded struct {
	base cuda.DevicePtr
	n    int // data bytes
}

func newGuarded(t *testing.T, d *cuda.Device, s *cuda.Stream, n, offset int) guarded {
	t.Helper()
	g := guarded{base: cudatest.Alloc(t, d, 2*guardLen+n+offset), n: n}
	must(t, s.Memset8(g.base, guard, 2*guardLen+n+offset))
	g.base = g.base.Add(offset)
	return g
}

func (g guarded) ptr() cuda.DevicePtr { return g.base.Add(guardLen) }

// read downloads the data, failing the test if a guard byte changed.
func (g guarded) read(t *testing.T, s *cuda.Stream) []byte {
	t.Helper()
	b := make([]byte, 2*guardLen+g.n)
	must(t, s.Download(b, g.base))
	band := bytes.Repeat([]byte{guard}, guardLen)
	if !bytes.Equal(b[:guardLen], band) || !bytes.Equal(b[guardLen+g.n:], band) {
		t.Errorf("a kernel wrote outside its %d-byte output", g.n)
	}
	return b[guardLen : guardLen+g.n]
}

// TestOddSizes runs every launcher on sizes around the 4-element vector
// width and on misaligned pointers (the scalar path), with guard bands, and
// compares with the fp8 package.
func TestOddSizes(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	for _, k := range sets {
		for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 255, 1024, 1000003} {
			for _, off := range []int{0, 1, 3} {
				t.Run(fmt.Sprintf("%v/n=%d/offset=%d", k.v, n, off), func(t *testing.T) {
					checkElementwise(t, k, s, n, off)
				})
			}
		}
	}
}

func checkElementwise(t *testing.T, k *Set, s *cuda.Stream, n, off int) {
	d := k.Device()
	x := testValues(n, uint64(n*8+off))
	src := newGuarded(t, d, s, 4*n, 4*off)
	must(t, s.Upload(src.ptr(), cuda.Bytes(x)))
	amax := cudatest.Alloc(t, d, 4)

	for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
		dst := newGuarded(t, d, s, n, off)
		must(t, k.EncodeFP8(s, dst.ptr(), src.ptr(), n, f))
		got := dst.read(t, s)
		for i := range x {
			if want := f.Encode(x[i]); got[i] != want {
				t.Errorf("EncodeFP8 %v [%d] %#08x: gpu %#02x, cpu %#02x", f, i, math.Float32bits(x[i]), got[i], want)
			}
		}

		const scale = 0.37
		must(t, s.Memset32(amax, 0, 1))
		must(t, k.CastScaled(s, dst.ptr(), src.ptr(), n, scale, f, amax))
		got = dst.read(t, s)
		want := make([]byte, n)
		wantAmax := fp8.CastScaled(want, x, scale, f)
		if i := firstDiff(got, want); i >= 0 {
			t.Errorf("CastScaled %v [%d] %#08x: gpu %#02x, cpu %#02x", f, i, math.Float32bits(x[i]), got[i], want[i])
		}
		var gotAmax [4]byte
		must(t, s.Download(gotAmax[:], amax))
		if g := cuda.View[uint32](gotAmax[:])[0]; g != math.Float32bits(wantAmax) {
			t.Errorf("CastScaled %v amax = %#08x, want %#08x", f, g, math.Float32bits(wantAmax))
		}

		codes := cuda.Bytes(x)[:n] // arbitrary bytes
		codeSrc := newGuarded(t, d, s, n, off)
		must(t, s.Upload(codeSrc.ptr(), codes))
		dec := newGuarded(t, d, s, 4*n, 4*off)
		must(t, k.DecodeFP8(s, dec.ptr(), codeSrc.ptr(), n, f))
		vals := cuda.View[uint32](bytes.Clone(dec.read(t, s)))
		for i, c := range codes {
			if want := math.Float32bits(f.Decode(c)); vals[i] != want {
				t.Errorf("DecodeFP8 %v %#02x: gpu %#08x, cpu %#08x", f, c, vals[i], want)
			}
		}
	}

	bf := newGuarded(t, d, s, 2*n, 2*off)
	must(t, k.BF16FromFloat32(s, bf.ptr(), src.ptr(), n))
	halves := cuda.View[uint16](bytes.Clone(bf.read(t, s)))
	for i := range x {
		if want := bf16.FromFloat32(x[i]); halves[i] != want {
			t.Errorf("BF16FromFloat32 [%d] %#08x: gpu %#04x, cpu %#04x", i, math.Float32bits(x[i]), halves[i], want)
		}
	}

	io := newGuarded(t, d, s, 4*n, 4*off)
	const base = 0xfffffffd // wraps around 2^32
	must(t, k.FillIota(s, io.ptr(), base, n))
	for i, v := range cuda.View[uint32](bytes.Clone(io.read(t, s))) {
		if v != base+uint32(i) {
			t.Fatalf("FillIota [%d] = %#x, want %#x", i, v, base+uint32(i))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestCastScaled compares CastScaled with fp8.CastScaled over scales that
// overflow, underflow and land on ties, and checks that the amax word
// accumulates (max with its earlier value).
func TestCastScaled(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	const n = 1<<20 + 3
	x := testValues(n, 99)
	finite := make([]float32, n)
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			v = 1
		}
		finite[i] = v
	}
	src, dst, amax := cudatest.Alloc(t, d, 4*n), cudatest.Alloc(t, d, n), cudatest.Alloc(t, d, 4)
	scales := []float32{1, 0.5, 0x1p-15, 7.1, 1e30, 1e-30, math.MaxFloat32, math.SmallestNonzeroFloat32, 448 / 3.3}
	for _, k := range sets {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			for _, data := range []struct {
				name string
				x    []float32
			}{{"all", x}, {"finite", finite}} {
				must(t, s.Upload(src, cuda.Bytes(data.x)))
				for _, scale := range scales {
					for _, preset := range []uint32{0, 0x7f800000} {
						name := fmt.Sprintf("%v/%v/%s/scale=%g/amax0=%#x", k.v, f, data.name, scale, preset)
						must(t, s.Memset32(amax, preset, 1))
						must(t, k.CastScaled(s, dst, src, n, scale, f, amax))
						got := make([]byte, n)
						must(t, s.Download(got, dst))
						var a [1]uint32
						must(t, s.Download(cuda.Bytes(a[:]), amax))
						want := make([]byte, n)
						wantAmax := max(math.Float32bits(fp8.CastScaled(want, data.x, scale, f)), preset)
						if i := firstDiff(got, want); i >= 0 {
							t.Errorf("%s: [%d] %#08x: gpu %#02x, cpu %#02x", name, i, math.Float32bits(data.x[i]), got[i], want[i])
						}
						if a[0] != wantAmax {
							t.Errorf("%s: amax %#08x, want %#08x", name, a[0], wantAmax)
						}
					}
				}
			}
		}
	}
}
