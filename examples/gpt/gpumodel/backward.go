package gpumodel

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/gemm"
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
	// The launches are queued in a few calls to the device's worker (one
	// per block, see onWorker); the names whose gradients are complete are
	// handed to ready between those calls, never from the worker, so ready
	// may wait for other users of the device.
	var pending []string
	flush := func() error {
		for _, name := range pending {
			if ready != nil {
				if err := ready(name); err != nil {
					return err
				}
			}
		}
		pending = pending[:0]
		return nil
	}
	done := func(name string) error {
		if err := m.gradDone(grads, name); err != nil {
			return err
		}
		pending = append(pending, name)
		return nil
	}
	if err := m.onWorker(func() error { return m.backwardHead(params, grads, done) }); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	for l := len(m.layers) - 1; l >= 0; l-- {
		if err := m.onWorker(func() error { return m.backwardLayer(params, grads, l, done) }); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
	}
	if err := m.onWorker(func() error { return m.backwardEmbed(grads, done) }); err != nil {
		return err
	}
	return flush()
}

// backwardHead queues the gradients of the loss, the tied head and the
// final LayerNorm.
func (m *Model) backwardHead(params Params, grads Grads, ready func(string) error) error {
	h, n := m.cfg.Hidden, m.rows
	wte, err := hp(params, "embed.tokens")
	if err != nil {
		return err
	}
	if err := m.clearGradSums(); err != nil {
		return err
	}
	gwte, err := m.gradSum(grads, "embed.tokens")
	if err != nil {
		return err
	}
	if err := m.headBackward(gwte, wte); err != nil {
		return err
	}
	if err := m.s.Memset32(m.dx, 0, n*h); err != nil {
		return err
	}
	return m.layerNormGrad(params, grads, "final_ln", m.xf, m.meanf, m.rstdf, ready)
}

// backwardLayer queues the gradients of block l given m.dx, the gradient
// of its output, and leaves the gradient of its input in m.dx.
func (m *Model) backwardLayer(params Params, grads Grads, l int, ready func(string) error) error {
	f, n := m.cfg.FFN, m.rows
	a := &m.layers[l]
	steps := []func() error{
		// m.dx: gradient of the block's output x2 + MLP(LN2(x2)).
		func() error {
			return m.restore(l, outL, func() error { return m.k.GPTGELUBF16(m.s, m.gelu, a.fc, n*f) }, m.gelu)
		},
		func() error { return m.linearGrad(params, grads, l, outL, m.dg, m.dx, ready) },
		func() error { return m.k.GPTGELUGradBF16(m.s, m.dfc, m.dg, a.fc, n*f) },
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
	return runSteps(steps)
}

// backwardEmbed queues the gradients of the token and position
// embeddings from m.dx.
func (m *Model) backwardEmbed(grads Grads, ready func(string) error) error {
	h, v := m.cfg.Hidden, m.cfg.Vocab
	gwte, err := m.gradSum(grads, "embed.tokens")
	if err != nil {
		return err
	}
	gwpe, err := m.gradSum(grads, "embed.positions")
	if err != nil {
		return err
	}
	// m.order and m.start were uploaded by Forward (upload).
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
	return lin.Restore(cuda.DevicePtr(x))
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
	if gv.DType != m.opts.gradType() {
		return fmt.Errorf("gpumodel: the gradient of %s is %v, the model was made for %v (Options.GradType)", gv.Name, gv.DType, m.opts.gradType())
	}
	gw, err := gemm.Gradient(gv.Data, gv.DType, true)
	if err != nil {
		return fmt.Errorf("gpumodel: %s: %w", gv.Name, err)
	}
	dxo := gemm.Output{Data: cuda.DevicePtr(dx), Type: buffer.Float32}
	if _, _, err := m.layers[l].lin[i].Backward(dxo, gw, cuda.DevicePtr(dy), w); err != nil {
		return fmt.Errorf("gpumodel: %s backward: %w", name, err)
	}
	gb, err := m.gradSum(grads, name+".bias")
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
	gw, err := m.gradSum(grads, name+".weight")
	if err != nil {
		return err
	}
	gb, err := m.gradSum(grads, name+".bias")
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
