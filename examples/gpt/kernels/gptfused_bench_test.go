package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
)

// The 1.3B shape of examples/gpt at its default micro-batch: 4 x 2048
// tokens, hidden 2048, FFN 8192.
const (
	fbRows = 8192
	fbH    = 2048
	fbF    = 8192
)

// BenchmarkFusedProducers times, at the 1.3B shape, the work that makes
// the FP8 inputs of fc (LayerNorm 2 after attn.proj's bias and residual
// connection) and of mlp.proj (fc's bias, GELU), per tensor and in 1x128
// blocks, fused (GPTLayerNormFP8, GPTBiasGELUFP8) and unfused (today's
// kernels, then gemm's Quantize of their float32 output), by gptTime:
// gpu-us/op, and GB/s of the bytes each way moves at least per element
// (layernorm fused: 4+4+4 then 4+1 per tensor, 4+4+4+1 in blocks;
// unfused: 12 (GPTBiasResidual) + 8 (GPTLayerNorm) + 4 (amax) + 5 (cast),
// or 12+8+5; gelu fused: 4+2 then 2+1, or 4+2+1; unfused: 6
// (GPTBiasAddBF16) + 6 (GPTGELUBF16) + 4 + 5, or 6+6+5; gelu epilogue,
// GPTGELUFP8 from the bfloat16 fc the GEMM's epilogue wrote with its bias:
// 2 then 2+1, or 2+1; delayed: layernorm 13, the epilogue's GELU 3, the
// scale given). fused over unfused gpu-us/op is the fusion's gain on
// these kernels. GELU's inputs (fc's product, and the epilogue's fc) are
// spread like the model's: on one constant every lane would take
// the same branch of tanhf, which made the GELU cases look faster than
// they run in training (scripts/gpu/NOTES.md, twenty-first session).
func BenchmarkFusedProducers(b *testing.B) {
	d := cudatest.Require(b)
	k, err := Load(d)
	must(b, err)
	b.Cleanup(func() { k.Close() })
	g := &gptBench{s: cudatest.Stream(b, d), k: k}
	e, err := gemm.New(d, g.s)
	cudatest.Unavailable(b, err, gemm.ErrUnavailable)
	b.Cleanup(func() { e.Close() })
	fill := func(n int, word uint32) cuda.DevicePtr { // n bytes
		p := cudatest.Alloc(b, d, n)
		must(b, g.s.Memset32(p, word, n/4))
		return p
	}
	const one, small = 0x3f800000, 0x3c003c00 // 1.0 in float32; 2^-7 in bfloat16 pairs
	x, res, y := fill(4*fbRows*fbH, one), fill(4*fbRows*fbH, one), fill(4*fbRows*fbF, one)
	// GELU's inputs spread like a model's fc (normal, standard deviation 2),
	// both branches of tanhf taken within a warp.
	spread := &fusedEnv{t: b, d: d, s: g.s, r: rand.New(rand.NewPCG(7, 3))}
	prod, fc, fcIn := spread.f32(fbRows*fbF, 0, 2), fill(2*fbRows*fbF, small), spread.bf(fbRows*fbF, 0, 2)
	w, bias, mean, rstd, amax := fill(2*fbF, small), fill(2*fbF, small), fill(4*fbRows, one), fill(4*fbRows, one), fill(4, 0)
	scale := fill(4, one)
	ln := LayerNormRows{X: x, W: w, B: bias, Mean: mean, Rstd: rstd, Rows: fbRows, N: fbH, Eps: 1e-5, Residual: res, Bias: bias}
	for _, r := range []fp8.Recipe{{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, {Format: fp8.E4M3, Scaling: fp8.Block1x128}} {
		lay, blocks := gemm.PerTensor, r.Scaling == fp8.Block1x128
		if blocks {
			lay = gemm.Rows128
		}
		qh, err := gemm.AllocOperand(d, fbRows, fbH, r.Format, lay, false)
		must(b, err)
		qf, err := gemm.AllocOperand(d, fbRows, fbF, r.Format, lay, false)
		must(b, err)
		b.Cleanup(func() { gemm.FreeOperand(d, qh); gemm.FreeOperand(d, qf) })
		name := map[bool]string{false: "current", true: "1x128"}[blocks]
		per := func(tensor, block int) int { return map[bool]int{false: tensor, true: block}[blocks] }
		b.Run("layernorm/"+name+"/fused", func(b *testing.B) {
			gptTime(b, g, per(17, 13)*fbRows*fbH, 0, func() error {
				return k.GPTLayerNormFP8(g.s, FP8Out{Data: qh.Data, ScaleInv: qh.ScaleInv, Recipe: r}, amax, ln)
			})
		})
		b.Run("layernorm/"+name+"/unfused", func(b *testing.B) {
			gptTime(b, g, per(29, 25)*fbRows*fbH, 0, func() error {
				if err := k.GPTBiasResidual(g.s, x, res, bias, fbRows, fbH); err != nil {
					return err
				}
				if err := k.GPTLayerNorm(g.s, y, mean, rstd, x, w, bias, fbRows, fbH, 1e-5); err != nil {
					return err
				}
				return e.Quantize(qh, y, buffer.Float32, r, 0, 0)
			})
		})
		if !blocks { // delayed scaling of the activations (-act-history): one pass each, the scale given
			del := FP8Out{Data: qh.Data, ScaleInv: qh.ScaleInv, Recipe: r, Scale: scale}
			b.Run("layernorm/"+name+"/delayed", func(b *testing.B) {
				gptTime(b, g, 13*fbRows*fbH, 0, func() error { return k.GPTLayerNormFP8(g.s, del, amax, ln) })
			})
			del.Data, del.ScaleInv = qf.Data, qf.ScaleInv
			b.Run("gelu/"+name+"/epilogue-delayed", func(b *testing.B) {
				gptTime(b, g, 3*fbRows*fbF, 0, func() error { return k.GPTGELUFP8(g.s, del, amax, fcIn, fbRows, fbF) })
			})
		}
		b.Run("gelu/"+name+"/fused", func(b *testing.B) {
			gptTime(b, g, per(9, 7)*fbRows*fbF, 0, func() error {
				return k.GPTBiasGELUFP8(g.s, FP8Out{Data: qf.Data, ScaleInv: qf.ScaleInv, Recipe: r}, amax, fc, prod, bias, fbRows, fbF)
			})
		})
		b.Run("gelu/"+name+"/epilogue", func(b *testing.B) {
			gptTime(b, g, per(5, 3)*fbRows*fbF, 0, func() error {
				return k.GPTGELUFP8(g.s, FP8Out{Data: qf.Data, ScaleInv: qf.ScaleInv, Recipe: r}, amax, fcIn, fbRows, fbF)
			})
		})
		b.Run("gelu/"+name+"/unfused", func(b *testing.B) {
			gptTime(b, g, per(21, 17)*fbRows*fbF, 0, func() error {
				if err := k.GPTBiasAddBF16(g.s, fc, prod, bias, fbRows, fbF); err != nil {
					return err
				}
				if err := k.GPTGELUBF16(g.s, y, fc, fbRows*fbF); err != nil {
					return err
				}
				return e.Quantize(qf, y, buffer.Float32, r, 0, 0)
			})
		})
	}
}
