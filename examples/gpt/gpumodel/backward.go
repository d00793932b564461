package gpumodel

import (
	"fmt"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
)

// Backward queues the backward pass of the last Forward and accumulates
// every parameter's gradient into its view (ZeroGrads first at a step's
// first micro-batch). ready, if not nil, is called with each parameter's
// name after its last gradient write has been queued, last layer first
// (optimizer.Optimizer.GradReady).
func (m *Model) Backward(params Params, grads Grads, ready func(name string) error) error {
	h, f, n, v := m.cfg.Hidden, m.cfg.FFN, m.rows, m.cfg.Vocab
	if ready == nil {
		ready = func(string) error { return nil }
	}
	g := func(name string) (cuda.DevicePtr, error) { return gradPtr(grads, name) }
	wte, err := hp(params, "embed.tokens")
	if err != nil {
		return err
	}
	gwte, err := g("embed.tokens")
	if err != nil {
		return err
	}
	if err := m.s.Memset32(m.dln, 0, n*h); err != nil {
		return err
	}
	if err := m.k.GPTLinearBF16Grad(m.s, m.dln, gwte, m.logits, m.lnf, wte, n, h, v); err != nil {
		return err
	}
	if err := m.s.Memset32(m.dx, 0, n*h); err != nil {
		return err
	}
	if err := m.layerNormGrad(params, grads, "final_ln", m.xf, m.meanf, m.rstdf, ready); err != nil {
		return err
	}
	for l := len(m.layers) - 1; l >= 0; l-- {
		a := &m.layers[l]
		steps := []func() error{
			// m.dx: gradient of the block's output x2 + MLP(LN2(x2)).
			func() error {
				return m.linearGrad(params, grads, lname(l, "mlp.proj"), m.dg, m.dx, m.dyC, a.geluq, ready)
			},
			func() error { return m.k.GPTGELUGrad(m.s, m.dfc, m.dg, a.fc, n*f) },
			func() error {
				return m.linearGrad(params, grads, lname(l, "mlp.fc"), m.dln, m.dfc, m.dyF, a.ln2q, ready)
			},
			func() error { return m.layerNormGrad(params, grads, lname(l, "ln2"), a.x2, a.mean2, a.rstd2, ready) },
			// m.dx: gradient of x2 = x + Attn(LN1(x)).
			func() error {
				return m.linearGrad(params, grads, lname(l, "attn.proj"), m.dtmp, m.dx, m.dyC, a.attq, ready)
			},
			func() error {
				return m.attn.backward(m.s, m.dqkv, m.ds, m.dtmp, a.p, a.qkv)
			},
			func() error {
				return m.linearGrad(params, grads, lname(l, "attn.qkv"), m.dln, m.dqkv, m.dy3C, a.ln1q, ready)
			},
			func() error { return m.layerNormGrad(params, grads, lname(l, "ln1"), a.x, a.mean1, a.rstd1, ready) },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
	}
	gwpe, err := g("embed.positions")
	if err != nil {
		return err
	}
	order, start := kernels.TokenRows(m.tokens, v)
	if err := m.s.Upload(m.order, cuda.Bytes(order)); err != nil {
		return err
	}
	if err := m.s.Upload(m.start, cuda.Bytes(start)); err != nil {
		return err
	}
	if err := m.k.GPTEmbedGradTokens(m.s, gwte, m.dx, m.order, m.start, v, h); err != nil {
		return err
	}
	if err := m.k.GPTEmbedGradPositions(m.s, gwpe, m.dx, m.batch, m.seq, h); err != nil {
		return err
	}
	if err := ready("embed.positions"); err != nil {
		return err
	}
	return ready("embed.tokens")
}

// linearGrad queues the gradients of the named linear layer given dy
// (float32 [rows, out]): dx = dy·W (overwritten), the weight gradient
// accumulated from dy (quantized into dyq) and the layer's FP8 input xq,
// and the bias gradient.
func (m *Model) linearGrad(params Params, grads Grads, name string, dx, dy cuda.DevicePtr, dyq, xq gemm.Operand, ready func(string) error) error {
	if err := m.e.Quantize(dyq, dy, collective.Float32, gradRecipe, 0, 0); err != nil {
		return err
	}
	pv, err := params(name + ".weight")
	if err != nil {
		return err
	}
	w, err := gemm.Weight(pv)
	if err != nil {
		return err
	}
	if _, err := m.e.DGrad(gemm.Output{Data: dx, Type: collective.Float32}, dyq, w); err != nil {
		return fmt.Errorf("gpumodel: %s dgrad: %w", name, err)
	}
	gv, err := grads(name + ".weight")
	if err != nil {
		return err
	}
	gw, err := gemm.Gradient(gv, true)
	if err != nil {
		return err
	}
	if _, err := m.e.WGrad(gw, dyq, xq); err != nil {
		return fmt.Errorf("gpumodel: %s wgrad: %w", name, err)
	}
	gb, err := gradPtr(grads, name+".bias")
	if err != nil {
		return err
	}
	if err := m.k.GPTColumnSum(m.s, gb, dy, m.rows, dyq.Cols); err != nil {
		return err
	}
	if err := ready(name + ".bias"); err != nil {
		return err
	}
	return ready(name + ".weight")
}

// layerNormGrad queues the gradients of the named LayerNorm of x: m.dx +=
// the input gradient from m.dln, and the weight and bias gradients.
func (m *Model) layerNormGrad(params Params, grads Grads, name string, x, mean, rstd cuda.DevicePtr, ready func(string) error) error {
	w, err := hp(params, name+".weight")
	if err != nil {
		return err
	}
	gw, err := gradPtr(grads, name+".weight")
	if err != nil {
		return err
	}
	gb, err := gradPtr(grads, name+".bias")
	if err != nil {
		return err
	}
	h := m.cfg.Hidden
	if err := m.k.GPTLayerNormGradX(m.s, m.dx, m.dln, x, mean, rstd, w, m.rows, h); err != nil {
		return err
	}
	if err := m.k.GPTLayerNormGradWB(m.s, gw, gb, m.dln, x, mean, rstd, m.rows, h); err != nil {
		return err
	}
	if err := ready(name + ".bias"); err != nil {
		return err
	}
	return ready(name + ".weight")
}
