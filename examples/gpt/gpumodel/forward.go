package gpumodel

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/gemm"
)

// Forward queues the forward pass on tokens [batch, seq] and the loss
// against targets (per row; Loss reads the mean), leaving the logits
// intact (Logits reads them). Unless dloss is 0 (evaluation: Backward is
// then refused), it also writes the logits' gradient, scaled by dloss
// (1/k when k micro-batches are averaged), into a buffer of its own for
// Backward.
func (m *Model) Forward(params Params, tokens, targets []int32, dloss float64) error {
	return m.onWorker(func() error { return m.forward(params, tokens, targets, dloss) })
}

// onWorker runs fn on the device's worker goroutine (cuda.Device.Do): the
// launches fn queues then skip the hand-off to the worker that each call
// from another goroutine pays (about 20 µs, more than many of the model's
// kernels take on the GPU). fn must not wait for other goroutines that use
// the device.
func (m *Model) onWorker(fn func() error) error { return m.d.Do(fn) }

func (m *Model) forward(params Params, tokens, targets []int32, dloss float64) error {
	m.mark(PhaseEmbed)
	if err := m.upload(tokens, targets); err != nil {
		return err
	}
	if err := m.linears(params); err != nil {
		return err
	}
	if err := m.startActScales(dloss); err != nil {
		return err
	}
	m.grad = false
	h, n := m.cfg.Hidden, m.rows
	wte, err := hp(params, "embed.tokens")
	if err != nil {
		return err
	}
	wpe, err := hp(params, "embed.positions")
	if err != nil {
		return err
	}
	x := m.xf
	if len(m.layers) > 0 {
		x = m.layers[0].x
	}
	if err := m.k.GPTEmbed(m.s, x, wte, wpe, m.tok, n, m.seq, h); err != nil {
		return err
	}
	for l := range m.layers {
		if err := m.forwardLayer(params, l); err != nil {
			return err
		}
	}
	if err := m.finalResidual(params); err != nil {
		return err
	}
	m.mark(PhaseHead)
	if err := m.layerNorm(params, "final_ln", m.lnf, m.meanf, m.rstdf, m.xf); err != nil {
		return err
	}
	if err := m.headForward(wte, dloss); err != nil {
		return err
	}
	m.endActScales()
	m.grad = dloss != 0
	return nil
}

// forwardLayer queues block l: its input is in its x, and its output goes
// to the next block's x (the last block's to m.xf). On the fused path
// (the default, see Options.Unfused) the output is the product of
// mlp.proj alone, the bias and residual connection left to the next
// LayerNorm (forwardFused).
func (m *Model) forwardLayer(params Params, l int) error {
	if m.opts.fused() {
		return m.forwardFused(params, l)
	}
	f, n := m.cfg.FFN, m.rows
	a := &m.layers[l]
	next := m.xf
	if l+1 < len(m.layers) {
		next = m.layers[l+1].x
	}
	steps := []func() error{
		func() error {
			m.mark(PhaseLayerNorm)
			return m.layerNorm(params, lname(l, "ln1"), m.ln, a.mean1, a.rstd1, a.x)
		},
		func() error { return m.linear(params, l, qkvL, m.dqkv, a.qkv, 0, m.ln) },
		func() error {
			m.mark(PhaseAttention)
			return m.attn.forward(m.s, m.att, a.p, a.qkv)
		},
		func() error { return m.linear(params, l, projL, a.x2, 0, a.x, m.attnOut(a)) },
		func() error {
			m.mark(PhaseLayerNorm)
			return m.layerNorm(params, lname(l, "ln2"), m.ln, a.mean2, a.rstd2, a.x2)
		},
		func() error { return m.linear(params, l, fcL, m.dfc, a.fc, 0, m.ln) },
		func() error {
			m.mark(PhaseGELU)
			return m.k.GPTGELUBF16(m.s, m.gelu, a.fc, n*f)
		},
		func() error { return m.linear(params, l, outL, next, 0, a.x2, m.gelu) },
	}
	return runSteps(steps)
}

// runSteps runs steps in order up to the first error.
func runSteps(steps []func() error) error {
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// linear runs y = x·Wᵀ + b for linear layer i of block l: x (float32
// [rows, in], or the layer's Config().Input) is quantized by the layer, which keeps it for backward (or,
// recomputed, does not). Either y16 or res is 0: y (float32) receives the
// product, then y16 the bfloat16 of y + b (GPTBiasAddBF16: the sum rounded
// once, the output the block keeps), or y becomes (y + b) + res
// (GPTBiasResidual: the residual connection).
func (m *Model) linear(params Params, l, i int, y, y16, res, x cuda.DevicePtr) error {
	if err := m.product(params, l, i, f32Out(y), x, nil); err != nil {
		return err
	}
	return m.bias(params, l, i, y, y16, res)
}

// bias queues the bias of linear layer i of block l to its product y:
// into y16 (GPTBiasAddBF16) or, when y16 is 0, in place with the residual
// connection from res (GPTBiasResidual).
func (m *Model) bias(params Params, l, i int, y, y16, res cuda.DevicePtr) error {
	m.mark(PhaseBias)
	b, err := hp(params, lname(l, linearNames[i])+".bias")
	if err != nil {
		return err
	}
	_, out := linearShape(m.cfg, i)
	if y16 != 0 {
		return m.k.GPTBiasAddBF16(m.s, y16, y, b, m.rows, out)
	}
	return m.k.GPTBiasResidual(m.s, y, res, b, m.rows, out)
}

// f32Out is the float32 output at y of a product without bias.
func f32Out(y cuda.DevicePtr) gemm.Output { return gemm.Output{Data: y, Type: buffer.Float32} }

// product queues out = x·Wᵀ (float32 without bias, or with Epilogue the
// bfloat16 of the product plus the bias) for linear layer i of block l: x
// quantized by the layer (gemm.Linear.Forward), or, when fill is not nil,
// the FP8 input fill writes (gemm.Linear.ForwardQuantized). The device
// allocator's count of what the layer allocates (its kept input, at the
// first Forward) joins the model's.
func (m *Model) product(params Params, l, i int, out gemm.Output, x cuda.DevicePtr, fill func(x gemm.Operand) error) error {
	name := lname(l, linearNames[i])
	w, err := weight(params, name)
	if err != nil {
		return err
	}
	lin := m.layers[l].lin[i]
	before, eng := m.d.Usage().DeviceBytes, m.engineBytes()
	if fill != nil {
		_, err = lin.ForwardQuantized(out, m.rows, w, fill)
	} else {
		_, err = lin.Forward(out, cuda.DevicePtr(x), m.rows, w)
	}
	m.device += m.d.Usage().DeviceBytes - before - (m.engineBytes() - eng)
	if err != nil {
		return fmt.Errorf("gpumodel: %s: %w", name, err)
	}
	return nil
}

// engineBytes is what the engine's growing buffers hold.
func (m *Model) engineBytes() int { return m.e.ActivationScratch() + m.e.ScratchBytes() }

// layerNorm queues the named LayerNorm of x into y, mean and rstd.
func (m *Model) layerNorm(params Params, name string, y, mean, rstd, x cuda.DevicePtr) error {
	w, err := hp(params, name+".weight")
	if err != nil {
		return err
	}
	b, err := hp(params, name+".bias")
	if err != nil {
		return err
	}
	return m.k.GPTLayerNorm(m.s, y, mean, rstd, x, w, b, m.rows, m.cfg.Hidden, model.LNEps)
}
