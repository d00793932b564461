package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// TestQuantAmaxPositions puts one large value (and a NaN, and a negative
// value) at positions that fall in each part of quant_amax's pass (the
// unrolled 16-byte loads, the remaining loads, the scalar tail) of tensors
// whose start is and is not 16-byte aligned, over small values of both
// signs, and checks the amax bits against fp8.Amax of the same values.
func TestQuantAmaxPositions(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	aux := cudatest.Alloc(t, d, 4)
	for _, k := range sets {
		for _, e := range []Elem{F32, BF16} {
			size, name := 4, "f32"
			if e == BF16 {
				size, name = 2, "bf16"
			}
			for _, n := range []int{1, 7, 8, 33, 4099, 1<<20 + 13} {
				for _, off := range []int{0, 1} { // elements: off 1 leaves the vector path
					buf := cudatest.Alloc(t, d, (n+off)*size)
					for _, p := range []int{0, 1, n / 3, n / 2, n - 9, n - 2, n - 1} {
						if p < 0 || p >= n {
							continue
						}
						for _, big := range []float32{3.5e4, -3.5e4, float32(math.NaN())} {
							vals := make([]float32, n)
							for i := range vals {
								vals[i] = float32(i%17-8) / 64
							}
							vals[p] = big
							raw, vals := reencode(vals, e)
							src := buf.Add(off * size)
							must(t, s.Upload(src, raw))
							must(t, s.Memset32(aux, 0, 1))
							must(t, k.QuantAmax(s, src, n, e, aux))
							w := make([]uint32, 1)
							must(t, s.Download(cuda.Bytes(w), aux))
							if want := math.Float32bits(fp8.Amax(vals)); w[0] != want {
								t.Errorf("%v %s n=%d off=%d: %v at %d: amax bits %#x, want %#x", k.v, name, n, off, big, p, w[0], want)
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkQuantAmax times the amax pass over the GPT example's bfloat16
// tensors whose amax is taken in a separate pass (the attention output and
// attn.qkv's output gradient, tokens x width at 124M and 1.3B) by CUDA
// events, with GB/s of the bytes read.
func BenchmarkQuantAmax(b *testing.B) {
	d, sets := loadAll(b)
	s := cudatest.Stream(b, d)
	aux := cudatest.Alloc(b, d, 4)
	for _, sh := range [][2]int{{16384, 768}, {16384, 2304}, {8192, 2048}, {8192, 6144}} {
		n := sh[0] * sh[1]
		src := cudatest.Alloc(b, d, 2*n)
		must(b, sets[0].FillIota(s, src, 0x3c003c00, n/2))
		for _, k := range sets {
			b.Run(fmt.Sprintf("%v/bf16/%dx%d", k.v, sh[0], sh[1]), func(b *testing.B) {
				gpuBench(b, d, s, 2*n, func() error { return k.QuantAmax(s, src, n, BF16, aux) })
			})
		}
	}
}
