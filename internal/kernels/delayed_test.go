package kernels

import (
	"fmt"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// BenchmarkDelayedScales times the scales of delayed scaling after a step
// by CUDA events: n rows of amax histories of l keys (the GPT example's
// FP8 weights: 48 at 124M, 96 at 1.3B, 1024 keys as Transformer Engine's
// default history), each row moved down by one key, with GB/s of the bytes
// read and written. Its results are checked by the backend conformance
// suite (optimizer/backendtest's delayed cases) against fp8.AmaxHistory.
func BenchmarkDelayedScales(b *testing.B) {
	d, sets := loadAll(b)
	s := cudatest.Stream(b, d)
	const l = 1024
	for _, n := range []int{48, 96, 4096} {
		scale, inv, cast := cudatest.Alloc(b, d, 4*n), cudatest.Alloc(b, d, 4*n), cudatest.Alloc(b, d, 4*n)
		hist, amax := cudatest.Alloc(b, d, 4*n*l), cudatest.Alloc(b, d, 4*n)
		must(b, sets[0].FillIota(s, hist, 0x3c000000, n*l))
		must(b, sets[0].FillIota(s, amax, 0x3c000000, n))
		must(b, sets[0].FillIota(s, scale, 0x3f800000, n))
		for _, k := range sets {
			b.Run(fmt.Sprintf("%v/n=%d/l=%d", k.v, n, l), func(b *testing.B) {
				gpuBench(b, d, s, 8*n*l, func() error {
					return k.DelayedScales(s, scale, inv, cast, hist, amax, 0, n, l, fp8.E4M3, 0, false, false)
				})
			})
		}
	}
}
