package gpumodel

import (
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/gemm"
)

// The fused forward pass (the default; Options.Unfused turns it off): the
// producers of the FP8 linear inputs quantize them as they compute them.
// issue 37's profile of the 1.3B micro-batch (docs/BENCHMARKS.md, "One
// micro-batch, activations and the other kernels") put about 30% of the
// time in element-wise and quantization kernels, among them "a separate
// amax pass over each float32 activation 6%, bias adds 4% ... FP8 casts
// 4%". Here:
//
//   - LayerNorm 1 and 2 (GPTLayerNormFP8) write the codes of qkv's and fc's
//     input instead of a float32 output that the layer then reads twice,
//     and take in the bias and residual connection of the linear layer
//     before them (mlp.proj of the previous block, attn.proj), so that
//     those products are left without bias in the residual stream's
//     buffer until then;
//   - fc's bias and bfloat16 rounding (GPTBiasGELUFP8) also write the codes
//     of GELU(fc), mlp.proj's input, which is never written in float32.
//
// With Options.Epilogue the qkv and fc GEMMs add their biases in
// cuBLASLt's epilogue and write the kept bfloat16 qkv and fc themselves:
// the float32 products and the bias passes go, and GELU reads fc as it is
// (GPTGELUFP8).
//
// Every byte the unfused pass writes that the fused one writes too (the
// residual stream, the LayerNorm statistics, qkv and fc, the FP8 inputs
// and their scales) is the same; with Options.DelayedActivations (not
// the unfused pass's) the FP8 inputs that LayerNorm and GELU write take
// other scales (actscale.go).

// fused reports whether the model runs the fused forward pass: not with
// Unfused, nor with Recompute, whose backward hands the linear layers
// float32 inputs to quantize again (gemm.Linear.Restore).
func (o Options) fused() bool { return !o.Unfused && !o.Recompute }

// forwardFused queues block l on the fused path. Its x holds, unless l is
// 0, the product of the previous block's mlp.proj, which LayerNorm 1 makes
// the residual stream first; its output, the product of its own mlp.proj,
// goes to the next block's x (the last block's to m.xf: finalResidual).
func (m *Model) forwardFused(params Params, l int) error {
	a := &m.layers[l]
	next := m.xf
	if l+1 < len(m.layers) {
		next = m.layers[l+1].x
	}
	var res cuda.DevicePtr // the residual stream before the previous block's MLP
	before := ""
	if l > 0 {
		res, before = m.layers[l-1].x2, lname(l-1, linearNames[outL])
	}
	qkv, err := m.biasedOut(params, l, qkvL, a.qkv, m.dqkv)
	if err != nil {
		return err
	}
	fc, err := m.biasedOut(params, l, fcL, a.fc, m.dfc)
	if err != nil {
		return err
	}
	steps := []func() error{
		func() error {
			return m.product(params, l, qkvL, qkv, 0, func(x gemm.Operand) error {
				m.mark(PhaseLayerNorm)
				q, amax := m.actOut(l, qkvL, x)
				return m.layerNormFP8(params, lname(l, "ln1"), before, q, amax, a.mean1, a.rstd1, a.x, res)
			})
		},
		func() error {
			if m.opts.Epilogue {
				return nil // the product wrote qkv with its bias
			}
			return m.bias(params, l, qkvL, m.dqkv, a.qkv, 0)
		},
		func() error {
			m.mark(PhaseAttention)
			return m.attn.forward(m.s, m.att, a.p, a.qkv)
		},
		func() error { return m.product(params, l, projL, f32Out(a.x2), m.attnOut(a), nil) },
		func() error {
			return m.product(params, l, fcL, fc, 0, func(x gemm.Operand) error {
				m.mark(PhaseLayerNorm)
				q, amax := m.actOut(l, fcL, x)
				return m.layerNormFP8(params, lname(l, "ln2"), lname(l, linearNames[projL]), q, amax, a.mean2, a.rstd2, a.x2, a.x)
			})
		},
		func() error {
			return m.product(params, l, outL, f32Out(next), 0, func(x gemm.Operand) error { return m.geluFP8(params, l, x) })
		},
	}
	return runSteps(steps)
}

// biasedOut returns the output of linear layer i of block l, qkv or fc:
// with Epilogue the kept bfloat16 y16 with the layer's bias added in the
// GEMM's epilogue (gemm.BF16Bias), otherwise the float32 scratch y32 that
// a bias pass then reads.
func (m *Model) biasedOut(params Params, l, i int, y16, y32 cuda.DevicePtr) (gemm.Output, error) {
	if !m.opts.Epilogue {
		return f32Out(y32), nil
	}
	b, err := hp(params, lname(l, linearNames[i])+".bias")
	if err != nil {
		return gemm.Output{}, err
	}
	return gemm.BF16Bias(y16, b), nil
}

// layerNormFP8 queues the named LayerNorm of x, writing its mean and
// rstd and the FP8 input q of the linear layer after it (its amax folded
// into amax: actOut). Unless res is 0, x holds the product of the linear
// layer named before, which becomes the residual stream first: x = (x +
// its bias) + res.
func (m *Model) layerNormFP8(params Params, name, before string, q kernels.FP8Out, amax, mean, rstd, x, res cuda.DevicePtr) error {
	ln := kernels.LayerNormRows{X: x, Mean: mean, Rstd: rstd, Rows: m.rows, N: m.cfg.Hidden, Eps: model.LNEps, Residual: res}
	var err error
	if ln.W, err = hp(params, name+".weight"); err != nil {
		return err
	}
	if ln.B, err = hp(params, name+".bias"); err != nil {
		return err
	}
	if res != 0 {
		if ln.Bias, err = hp(params, before+".bias"); err != nil {
			return err
		}
	}
	return m.k.GPTLayerNormFP8(m.s, q, amax, ln)
}

// geluFP8 queues fc's bias (into the kept bfloat16 fc of block l, from the
// product in m.dfc) and the FP8 input q of mlp.proj, GELU(fc). With
// Epilogue the product wrote fc with its bias: GELU reads it as it is.
func (m *Model) geluFP8(params Params, l int, x gemm.Operand) error {
	m.mark(PhaseGELU)
	q, amax := m.actOut(l, outL, x)
	if m.opts.Epilogue {
		return m.k.GPTGELUFP8(m.s, q, amax, m.layers[l].fc, m.rows, m.cfg.FFN)
	}
	b, err := hp(params, lname(l, linearNames[fcL])+".bias")
	if err != nil {
		return err
	}
	return m.k.GPTBiasGELUFP8(m.s, q, amax, m.layers[l].fc, m.dfc, b, m.rows, m.cfg.FFN)
}

// finalResidual, on the fused path, makes m.xf, the product of the last
// block's mlp.proj, the residual stream (bias and residual connection)
// before the final LayerNorm.
func (m *Model) finalResidual(params Params) error {
	L := len(m.layers)
	if !m.opts.fused() || L == 0 {
		return nil
	}
	return m.bias(params, L-1, outL, m.xf, 0, m.layers[L-1].x2)
}
