package kernels

import (
	"testing"
	"time"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// BenchmarkFlashKernels times the fused attention kernels alone (no copies
// of the heads) at the GPT's 124M shape (batch 8, seq 1024, 12 heads of
// 64) and 1.3B shape (batch 4, seq 2048, 16 heads of 128), in the variant
// the device loads: FlashForward, and FlashBackward (its three kernels),
// each pass waited for, with the fragments loaded by ldmatrix (the
// launchers' choice) and by plain shared loads. TFLOP/s count the causal FLOPs of the products:
// forward 2·B·H·T²·D (q·kᵀ and p·v over the lower half), backward
// 5·B·H·T²·D (the scores recomputed, dP, dV, dQ, dK).
func BenchmarkFlashKernels(b *testing.B) {
	d, sets := loadAll(b)
	k := sets[len(sets)-1]
	s := cudatest.Stream(b, d)
	for _, c := range []struct {
		name string
		sh   FlashShape
	}{{"124M", FlashShape{8, 12, 1024, 64}}, {"1.3B", FlashShape{4, 16, 2048, 128}}} {
		sh := c.sh
		n, hd := sh.Rows()*sh.D, sh.Heads*sh.D
		q, kk, v := cudatest.Alloc(b, d, 2*n), cudatest.Alloc(b, d, 2*n), cudatest.Alloc(b, d, 2*n)
		for _, p := range []cuda.DevicePtr{q, kk, v} { // bfloat16 2^-6 and 2^-7 alternating
			must(b, s.Memset32(p, 0x3c003c80, n/2))
		}
		o, dO, dqkv := cudatest.Alloc(b, d, 4*n), cudatest.Alloc(b, d, 4*n), cudatest.Alloc(b, d, 12*n)
		must(b, s.Memset32(dO, 0x3c000000, n))
		o16, lse := cudatest.Alloc(b, d, 2*n), cudatest.Alloc(b, d, 4*sh.Rows())
		n16, nsum := FlashScratchBytes(sh)
		scr := FlashScratch{DO16: cudatest.Alloc(b, d, n16), DSum: cudatest.Alloc(b, d, nsum)}
		g := FlashGrads{DQ: FlashRows{dqkv, 3 * hd}, DK: FlashRows{dqkv.Add(4 * hd), 3 * hd}, DV: FlashRows{dqkv.Add(8 * hd), 3 * hd}}
		scale := float32(0.125)
		unit := float64(sh.Batch*sh.Heads) * float64(sh.Seq) * float64(sh.Seq) * float64(sh.D)
		for _, l := range []flashLoads{flashLdmatrix, flashLDS} {
			fwd := func() error { return k.flashForward(s, FlashRows{o, hd}, o16, lse, q, kk, v, sh, scale, l) }
			bwd := func() error { return k.flashBackward(s, g, scr, FlashRows{dO, hd}, q, kk, v, o16, lse, sh, scale, l) }
			for _, pass := range []struct {
				name  string
				run   func() error
				flops float64
			}{{"fwd", fwd, 2 * unit}, {"bwd", bwd, 5 * unit}} {
				b.Run(c.name+"/"+l.String()+"/"+pass.name, func(b *testing.B) {
					must(b, fwd()) // the backward reads the forward's lse and o16
					must(b, s.Synchronize())
					start := time.Now()
					for b.Loop() {
						must(b, pass.run())
						must(b, s.Synchronize())
					}
					per := time.Since(start).Seconds() / float64(b.N)
					b.ReportMetric(per*1e3, "ms/op")
					b.ReportMetric(pass.flops/per/1e12, "causal-TFLOP/s")
				})
			}
		}
	}
}
