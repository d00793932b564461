package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// scaleInputs returns amax bit patterns for TestScalesFromAmax: zeros,
// subnormals, every power of two and its neighbours, the formats' maxima,
// the largest finite value, infinities and NaNs, with and without the
// sign bit, then random patterns.
func scaleInputs() []uint32 {
	var in []uint32
	for e := uint32(0); e < 256; e++ {
		for _, m := range []uint32{0, 1, 0x400000, 0x7fffff} {
			in = append(in, e<<23|m, 0x80000000|e<<23|m)
		}
	}
	for _, f := range []float32{448, 57344, 1.0 / 448, 1.0 / 57344, math.MaxFloat32} {
		b := math.Float32bits(f)
		in = append(in, b-1, b, b+1)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1 << 16 {
		in = append(in, r.Uint32())
	}
	return in
}

// TestScalesFromAmax checks the device's scales of many amaxes against
// fp8.ScaleFromAmax, bit for bit, for both formats, several margins and
// power-of-two scales on and off.
func TestScalesFromAmax(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	in := scaleInputs()
	n := len(in)
	amax := cudatest.Alloc(t, d, 4*n)
	out := cudatest.Alloc(t, d, 8*n)
	must(t, s.Upload(amax, cuda.Bytes(in)))
	for _, k := range sets {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			for _, margin := range []int{0, 1, 3} {
				for _, pow2 := range []bool{false, true} {
					t.Run(fmt.Sprintf("%v/%v/margin=%d/pow2=%t", k.v, f, margin, pow2), func(t *testing.T) {
						must(t, s.Memset32(out, 0xdeadbeef, 2*n))
						must(t, k.ScalesFromAmax(s, out, out.Add(4*n), amax, 0, n, f, margin, pow2))
						got := make([]uint32, 2*n)
						must(t, s.Download(cuda.Bytes(got), out))
						bad := 0
						for i, b := range in {
							scale, inv := fp8.ScaleFromAmax(math.Float32frombits(b), f, margin, pow2)
							if got[i] != math.Float32bits(scale) || got[n+i] != math.Float32bits(inv) {
								if bad++; bad <= 5 {
									t.Errorf("amax %#08x: scale %#08x inv %#08x, want %#08x %#08x", b, got[i], got[n+i], math.Float32bits(scale), math.Float32bits(inv))
								}
							}
						}
					})
				}
			}
		}
	}
}
