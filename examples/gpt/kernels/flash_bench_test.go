package kernels

import (
	"testing"
	"time"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
)

// BenchmarkFlashKernels times the fused attention kernels alone (no copies
// of the heads) at the GPT's 124M shape (batch 8, seq 1024, 12 heads of
// 64) and 1.3B shape (batch 4, seq 2048, 16 heads of 128), in the variant
// the device loads: every variant of each tile kernel (fwd, dkdv, dq, each
// launch waited for; dq of flashDS reads the dS its dkdv stored), the
// whole backward pass of each variant ("bwd": prep, dkdv, dq), then
// FlashForward and FlashBackward with the launchers' defaults ("default").
// The defaults (module flash) run the driver's JIT code, the other
// variants (flashalt) ptxas's: compare variants with DISTOPT_CUDA_PTX=1.
// causal-TFLOP/s count
// the causal FLOPs of the products: forward 2·B·H·T²·D (q·kᵀ and p·v over
// the lower half), backward 5·B·H·T²·D (the scores recomputed, dP, dV, dQ,
// dK); mma-TFLOP/s count the products a backward kernel runs (dK/dV 4 and
// dQ 3 of those B·H·T²·D, flashDS's dQ 1).
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
		fwd := func(fv flashVariant) func() error {
			return func() error { return k.flashForward(s, FlashRows{o, hd}, o16, lse, q, kk, v, sh, scale, fv) }
		}
		ds := cudatest.Alloc(b, d, FlashDSBytes(sh))
		grad := func(p flashPass, fv flashVariant) func() error {
			return func() error { return k.flashGrad(s, p, fv, g, scr, q, kk, v, lse, sh, scale, ds) }
		}
		bwd := func(fv flashVariant) func() error {
			var dsv cuda.DevicePtr
			if fv == flashDS {
				dsv = ds
			}
			return func() error {
				return k.flashBackward(s, g, scr, FlashRows{dO, hd}, q, kk, v, o16, lse, sh, scale, fv, fv, dsv)
			}
		}
		// The backward kernels read the forward's lse and o16 and the prep's scratch.
		must(b, k.FlashForward(s, FlashRows{o, hd}, o16, lse, q, kk, v, sh, scale))
		must(b, k.FlashBackward(s, g, scr, FlashRows{dO, hd}, q, kk, v, o16, lse, sh, scale))
		must(b, s.Synchronize())
		type pass struct {
			name, unit string
			run        func() error
			flops      float64
		}
		var passes []pass
		dqProducts := func(fv flashVariant) float64 {
			if fv == flashDS {
				return 1
			}
			return 3
		}
		for _, fv := range flashVariants {
			for _, p := range []struct {
				p     flashPass
				flops float64
				unit  string
				run   func() error
			}{{flashFwd, 2 * unit, "causal-TFLOP/s", fwd(fv)}, {flashDKDV, 4 * unit, "mma-TFLOP/s", grad(flashDKDV, fv)},
				{flashDQ, dqProducts(fv) * unit, "mma-TFLOP/s", grad(flashDQ, fv)}, {flashBwd, 5 * unit, "causal-TFLOP/s", bwd(fv)}} {
				if flashHas(p.p, sh.D, fv) {
					passes = append(passes, pass{flashPassName(p.p) + "/" + fv.String(), p.unit, p.run, p.flops})
				}
			}
		}
		passes = append(passes, pass{"fwd/default", "causal-TFLOP/s", func() error {
			return k.FlashForward(s, FlashRows{o, hd}, o16, lse, q, kk, v, sh, scale)
		}, 2 * unit}, pass{"bwd/default", "causal-TFLOP/s", func() error {
			return k.FlashBackward(s, g, scr, FlashRows{dO, hd}, q, kk, v, o16, lse, sh, scale)
		}, 5 * unit})
		for _, p := range passes {
			b.Run(c.name+"/"+p.name, func(b *testing.B) {
				must(b, p.run()) // warm up (and set the shared memory limit)
				must(b, s.Synchronize())
				start := time.Now()
				for b.Loop() {
					must(b, p.run())
					must(b, s.Synchronize())
				}
				per := time.Since(start).Seconds() / float64(b.N)
				b.ReportMetric(per*1e3, "ms/op")
				b.ReportMetric(p.flops/per/1e12, p.unit)
			})
		}
	}
}

// flashBwd stands, in the benchmark, for the whole backward pass.
const flashBwd flashPass = -1

// flashHas reports whether variant v has the kernel of pass p at head
// width d (for flashBwd: both backward kernels).
func flashHas(p flashPass, d int, v flashVariant) bool {
	if p == flashBwd {
		return flashHas(flashDKDV, d, v) && flashHas(flashDQ, d, v)
	}
	_, ok := flashTileOf(p, d, v)
	return ok
}

// flashPassName names pass p in the benchmark ("bwd" for flashBwd).
func flashPassName(p flashPass) string {
	if p == flashBwd {
		return "bwd"
	}
	return p.String()
}
