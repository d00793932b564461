package gpumodel

import (
	"errors"
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
// (optimizer.Optimizer.GradReady). With Options.Recompute the LayerNorm
// and GELU outputs are recomputed here, into the shared buffers, before
// the layers that read them.
func (m *Model) Backward(params Params, grads Grads, ready func(name string) error) error {
	if !m.grad {
		return errors.New("gpumodel: Backward without a Forward with a non-zero dloss since the last Backward")
	}
	m.grad = false
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
	if err := m.k.GPTLinearBF16Grad(m.s, m.dln, gwte, m.dlogits, m.lnf, wte, n, h, v); err != nil {
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
				return m.restore(l, outL, func() error { return m.k.GPTGELU(m.s, m.gelu, a.fc, n*f) }, m.gelu)
			},
			func() error { return m.linearGrad(params, grads, l, outL, m.dg, m.dx, ready) },
			func() error { return m.k.GPTGELUGrad(m.s, m.dfc, m.dg, a.fc, n*f) },
			func() error {
				return m.restore(l, fcL, func() error { return m.layerNorm(params, lname(l, "ln2"), m.ln, a.mean2, a.rstd2, a.x2) }, m.ln)
			},
			func() error { return m.linearGrad(params, grads, l, fcL, m.dln, m.dfc, ready) },
			func() error { return m.layerNormGrad(params, grads, lname(l, "ln2"), a.x2, a.mean2, a.rstd2, ready) },
			// m.dx: gradient of x2 = x + Attn(LN1(x)).
			func() error { return m.linearGrad(params, grads, l, projL, m.dtmp, m.dx, ready) },
			func() error {
				return m.attn.backward(m.s, m.dqkv, m.ds, m.dtmp, a.p, a.qkv)
			},
			func() error {
				return m.restore(l, qkvL, func() error { return m.layerNorm(params, lname(l, "ln1"), m.ln, a.mean1, a.rstd1, a.x) }, m.ln)
			},
			func() error { return m.linearGrad(params, grads, l, qkvL, m.dln, m.dqkv, ready) },
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

// restore, for a linear layer whose input is recomputed (Options.Recompute),
// runs recompute (the forward kernel again, into the shared buffer x) and
// hands x back to the layer; otherwise it does nothing. The forward
// kernels are deterministic, so x gets Forward's bits: a LayerNorm again
// from the kept x (it also writes mean and rstd again, the same values),
// GELU again from the kept fc.
func (m *Model) restore(l, i int, recompute func() error, x cuda.DevicePtr) error {
	lin := m.layers[l].lin[i]
	if !lin.Config().Recompute {
		return nil
	}
	if err := recompute(); err != nil {
		return err
	}
	return lin.Restore(x)
}

// linearGrad queues the gradients of linear layer i of block l given dy
// (float32 [rows, out]): dx = dy·W (overwritten), the weight gradient
// accumulated into its view from dy and the layer's kept (or restored)
// input, and the bias gradient.
func (m *Model) linearGrad(params Params, grads Grads, l, i int, dx, dy cuda.DevicePtr, ready func(string) error) error {
	name := lname(l, linearNames[i])
	w, err := weight(params, name)
	if err != nil {
		return err
	}
	gv, err := grads(name + ".weight")
	if err != nil {
		return err
	}
	gw, err := gemm.Gradient(gv, true)
	if err != nil {
		return err
	}
	dxo := gemm.Output{Data: dx, Type: collective.Float32}
	if _, _, err := m.layers[l].lin[i].Backward(dxo, gw, dy, w); err != nil {
		return fmt.Errorf("gpumodel: %s backward: %w", name, err)
	}
	gb, err := gradPtr(grads, name+".bias")
	if err != nil {
		return err
	}
	if err := m.k.GPTColumnSum(m.s, gb, dy, m.rows, w.Rows); err != nil {
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
