package fp8grad_test

import (
	"fmt"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/kernels"
)

// BenchmarkGPUCodec times the GPU codec of one rank's FP8 reduce-scatter
// of a bfloat16 bucket of 256 Mi elements (512 MiB) on d ranks: GradQuantize
// of its d pieces (reads 2 bytes, writes 1.03 per element), then GradSum of
// d received pieces into its bfloat16 shard. Throughput (SetBytes) counts
// the bucket's bfloat16 bytes: set against the reduce-scatter time of the
// same bucket to see what the codec adds. Skips without a GPU.
func BenchmarkGPUCodec(b *testing.B) {
	d := cudatest.Require(b)
	k, err := kernels.Load(d)
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	s := cudatest.Stream(b, d)
	const total = 256 << 20
	for _, ranks := range []int{2, 8} {
		n := total / ranks
		pb := kernels.GradPieceBytes(n, 128)
		src := cudatest.Alloc(b, d, 2*total)
		wire := cudatest.Alloc(b, d, ranks*pb)
		dst := cudatest.Alloc(b, d, 2*n)
		if err := s.Memset8(src, 0x3c, 2*total); err != nil {
			b.Fatal(err)
		}
		for _, step := range []string{"quantize", "sum", "both"} {
			b.Run(fmt.Sprintf("d=%d/%s", ranks, step), func(b *testing.B) {
				b.SetBytes(2 * total)
				for b.Loop() {
					if step != "sum" {
						if err := k.GradQuantize(s, wire, src, 0, n, ranks, 128, kernels.BF16, fp8.E4M3); err != nil {
							b.Fatal(err)
						}
					}
					if step != "quantize" {
						if err := k.GradSum(s, dst, wire, n, ranks, 128, kernels.BF16, fp8.E4M3, float32(ranks)); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
