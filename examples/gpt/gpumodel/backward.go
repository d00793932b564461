package gpumodel

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
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
	return m.backward(params, grads, ready, false)
}

// BackwardInto is Backward for a step's first micro-batch, in place of
// ZeroGrads and Backward: the linear layers' weight gradients are written
// by their GEMMs instead of added to their views, and only the other
// gradients' views (biases, LayerNorms, embeddings) are zeroed first. At
// 1.3B the linear weights hold 99.6% of the gradient bytes ZeroGrads
// writes (4.8 GB of float32, about 1.5 ms of an H200's bandwidth per
// step). The gradients are those of ZeroGrads and Backward, but for the
// sign of an exactly zero sum (0 + -0 is +0), which no update tells
// apart.
func (m *Model) BackwardInto(params Params, grads Grads, ready func(name string) error) error {
	return m.backward(params, grads, ready, true)
}

// backward runs Backward; into says BackwardInto.
func (m *Model) backward(params Params, grads Grads, ready func(name string) error, into bool) error {
	if !m.grad {
		return errors.New("gpumodel: Backward without a Forward with a non-zero dloss since the last Backward")
	}
	m.grad = false
	if into {
		if err := m.onWorker(func() error { return m.zeroGrads(grads, isLinearWeight) }); err != nil {
			return err
		}
		m.into = true
		defer func() { m.into = false }()
	}
	// The launches are queued in a few calls to the device's worker (one
	// per block, see onWorker); the names whose gradients are complete are
	// handed to ready between those calls, never from the worker, so ready
	// may wait for other users of the device. What ready queues on the
	// model's stream is the optimizer's (PhaseOptimizer), not the phase
	// the block ended with.
	var pending []string
	flush := func() error {
		if len(pending) > 0 && ready != nil {
			m.mark(PhaseOptimizer)
			for _, name := range pending {
				if err := ready(name); err != nil {
					return err
				}
			}
		}
		pending = pending[:0]
		return nil
	}
	done := func(name string) error {
		pending = append(pending, name)
		return nil
	}
	// block queues one block's launches and then, in the same call to the
	// worker, the bfloat16 views' sums of the gradients it completed.
	block := func(f func() error) error {
		return m.onWorker(func() error {
			if err := f(); err != nil {
				return err
			}
			return m.gradsDone(grads, pending)
		})
	}
	if err := block(func() error { return m.backwardHead(params, grads, done) }); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	for l := len(m.layers) - 1; l >= 0; l-- {
		if err := block(func() error { return m.backwardLayer(params, grads, l, done) }); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
	}
	if err := block(func() error { return m.backwardEmbed(grads, done) }); err != nil {
		return err
	}
	return flush()
}

// backwardHead queues the gradients of the loss, the tied head and the
// final LayerNorm.
func (m *Model) backwardHead(params Params, grads Grads, ready func(string) error) error {
	m.mark(PhaseHead)
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
	// The head's gradient m.dln is float32 whatever ActGradBF16 says.
	return m.layerNormGrad(params, grads, "final_ln", m.xf, m.meanf, m.rstdf, false, ready)
}

// backwardLayer queues the gradients of block l given m.dx, the gradient
// of its output, and leaves the gradient of its input in m.dx. On the
// fused path (fusedBackward) m.amax holds, before each linear layer whose
// output gradient a LayerNorm or GELU gradient wrote, the amax key of
// that gradient (attn.qkv's, written by attention, gets gemm's own pass).
func (m *Model) backwardLayer(params Params, grads Grads, l int, ready func(string) error) error {
	f, n := m.cfg.FFN, m.rows
	a := &m.layers[l]
	bf := m.opts.ActGradBF16
	steps := []func() error{
		// m.dx: gradient of the block's output x2 + MLP(LN2(x2)).
		func() error {
			return m.restore(l, outL, func() error { return m.k.GPTGELUBF16(m.s, m.gelu, a.fc, n*f) }, m.gelu)
		},
		func() error { return m.linearGrad(params, grads, l, outL, m.dg, m.dx, m.dyAmax(), ready) },
		func() error {
			m.mark(PhaseGELUBwd)
			if !m.opts.fusedBackward() {
				return m.k.GPTGELUGradBF16(m.s, m.dfc, m.dg, a.fc, n*f)
			}
			return m.k.GPTGELUGradAmax(m.s, m.dfc, m.dg, a.fc, m.dyAmax(), n*f, bf)
		},
		func() error {
			return m.restore(l, fcL, func() error { return m.layerNorm(params, lname(l, "ln2"), m.ln, a.mean2, a.rstd2, a.x2) }, m.ln)
		},
		func() error { return m.linearGrad(params, grads, l, fcL, m.dln, m.dfc, m.dyAmax(), ready) },
		func() error {
			return m.layerNormGrad(params, grads, lname(l, "ln2"), a.x2, a.mean2, a.rstd2, bf, ready)
		},
		// m.dx: gradient of x2 = x + Attn(LN1(x)).
		func() error { return m.linearGrad(params, grads, l, projL, m.dtmp, m.dx, m.dyAmax(), ready) },
		func() error {
			m.mark(PhaseAttentionBwd)
			return m.attn.backward(m.s, m.dqkv, m.ds, m.dtmp, a.p, a.qkv)
		},
		func() error {
			return m.restore(l, qkvL, func() error { return m.layerNorm(params, lname(l, "ln1"), m.ln, a.mean1, a.rstd1, a.x) }, m.ln)
		},
		func() error { return m.linearGrad(params, grads, l, qkvL, m.dln, m.dqkv, 0, ready) },
		func() error { return m.layerNormGrad(params, grads, lname(l, "ln1"), a.x, a.mean1, a.rstd1, bf, ready) },
	}
	return runSteps(steps)
}

// backwardEmbed queues the gradients of the token and position
// embeddings from m.dx.
func (m *Model) backwardEmbed(grads Grads, ready func(string) error) error {
	m.mark(PhaseEmbed)
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
	if i == outL {
		m.mark(PhaseGELU)
	} else {
		m.mark(PhaseLayerNorm)
	}
	if err := recompute(); err != nil {
		return err
	}
	return lin.Restore(cuda.DevicePtr(x))
}

// linearGrad queues the gradients of linear layer i of block l given dy
// ([rows, out], float32, or bfloat16 for a layer whose Config().GradInput
// says so): dx = dy·W (overwritten; bfloat16 where dgradBF16 says so),
// the weight gradient accumulated into its view from dy and the layer's
// kept (or restored) input, and the bias gradient. amax, unless 0, holds
// the amax key of dy (gemm.Linear.BackwardAmax).
func (m *Model) linearGrad(params Params, grads Grads, l, i int, dx, dy, amax cuda.DevicePtr, ready func(string) error) error {
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
	gw, err := gemm.Gradient(gv.Data, gv.DType, !m.into) // BackwardInto: written, not added
	if err != nil {
		return fmt.Errorf("gpumodel: %s: %w", gv.Name, err)
	}
	lin := m.layers[l].lin[i]
	dxo := gemm.Output{Data: cuda.DevicePtr(dx), Type: buffer.Float32}
	if m.opts.dgradBF16(i) {
		dxo.Type = buffer.BFloat16
	}
	gb, err := m.gradSum(grads, name+".bias")
	if err != nil {
		return err
	}
	bf := lin.Config().GradInput == buffer.BFloat16
	if lin.Config().CallerCastsDY { // Options.FuseDY: the cast sums the bias gradient
		cast := func(q, qT gemm.Operand, scale cuda.DevicePtr) error {
			return m.k.GPTDYCast(m.s, q.Data, qT.Data, gb, dy, scale, m.rows, w.Rows, q.Format, bf)
		}
		if _, _, err := lin.BackwardCast(dxo, gw, cuda.DevicePtr(dy), cuda.DevicePtr(amax), w, cast); err != nil {
			return fmt.Errorf("gpumodel: %s backward: %w", name, err)
		}
	} else {
		if _, _, err := lin.BackwardAmax(dxo, gw, cuda.DevicePtr(dy), cuda.DevicePtr(amax), w); err != nil {
			return fmt.Errorf("gpumodel: %s backward: %w", name, err)
		}
		m.mark(PhaseBiasGrad)
		sum := m.k.GPTColumnSum
		if bf {
			sum = m.k.GPTColumnSumBF16
		}
		if err := sum(m.s, gb, dy, m.rows, w.Rows); err != nil {
			return err
		}
	}
	if err := ready(name + ".bias"); err != nil {
		return err
	}
	return ready(name + ".weight")
}

// layerNormGrad queues the gradients of the named LayerNorm of x: m.dx +=
// the input gradient from m.dln (bfloat16 when dln16, else float32), and
// the weight and bias gradients. On the fused path it leaves in m.amax
// the amax key of the m.dx it leaves (per-tensor recipes).
func (m *Model) layerNormGrad(params Params, grads Grads, name string, x, mean, rstd cuda.DevicePtr, dln16 bool, ready func(string) error) error {
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
	m.mark(PhaseLayerNormBwd)
	if m.opts.fusedBackward() {
		err = m.k.GPTLayerNormGradXAmax(m.s, m.dx, m.dln, x, mean, rstd, w, m.dyAmax(), m.rows, h, dln16)
	} else {
		err = m.k.GPTLayerNormGradX(m.s, m.dx, m.dln, x, mean, rstd, w, m.rows, h)
	}
	if err != nil {
		return err
	}
	wb := m.k.GPTLayerNormGradWB
	if dln16 {
		wb = m.k.GPTLayerNormGradWBBF16
	}
	if err := wb(m.s, gw, gb, m.dln, x, mean, rstd, m.rows, h); err != nil {
		return err
	}
	if err := ready(name + ".bias"); err != nil {
		return err
	}
	return ready(name + ".weight")
}

// The fused backward pass (the default; Options.Unfused turns it off).
// issue 37's profile of the 1.3B micro-batch (docs/BENCHMARKS.md, "One
// micro-batch, activations and the other kernels") counted "a separate
// amax pass over each float32 activation 6%": each linear layer's
// Backward read its output gradient dy once for the amax before the cast.
// Here LayerNorm's input gradient (the residual stream's gradient m.dx,
// mlp.proj's and attn.proj's dy) and GELU's gradient (mlp.fc's dy) fold
// the amax of the values they write into m.amax (kernels.GPTLayerNormGradXAmax,
// GPTGELUGradAmax) and gemm.Linear.BackwardAmax takes it: the same scale,
// the same bits, 4 bytes per element of three of the four dy fewer read
// (attn.qkv's dy, written by attention, keeps gemm's pass). 1x128 blocks
// have no tensor amax: nothing is folded there.
//
// Bytes of element-wise traffic of backward per block, n tokens, h hidden,
// f = 4h, per-tensor recipes without KeepTransposed or Recompute (the
// GEMMs' reads of FP8 operands and attention not counted):
//
//	                              Unfused   fused   + ActGradBF16
//	dy amax passes (4 B/elem)       36nh     12nh       12nh
//	dy casts (read dy, write 1)     45nh     45nh       37nh
//	dy and x transposes (1 + 1)     32nh     32nh       32nh
//	bias sums (read dy)             36nh     36nh       28nh
//	dgrad outputs written           28nh     28nh       16nh
//	GELU gradient (dg, fc, dfc)     40nh     40nh       24nh
//	LayerNorm dx (dln, x, dx r+w)   32nh     32nh       28nh
//	LayerNorm dw, db (dln, x)       16nh     16nh       12nh
//	total                          265nh    241nh      189nh
//
// At 1.3B x 4 x 2048 (n = 8192, h = 2048) nh is 16.8 MB: about 4.4, 4.0
// and 3.2 GB per block. The rest is dominated by dy's cast and
// transposes and the bias sums, which Options.FuseDY folds into one pass
// (kernels.GPTDYCast): per float32 dy element 4 bytes read and 2 written
// where the cast, the transpose and the bias sum move 4+1, 1+1 and 4:
// the bias sums' 36nh and the transposes' 9nh reads of dy less, about
// 0.75 GB per block at 1.3B (with ActGradBF16, mlp.fc's dy is read in
// two bytes).

// fusedBackward reports whether backward folds the output gradients'
// amaxes into their producers: unless Unfused (Recompute too: it only
// recomputes the linear layers' inputs).
func (o Options) fusedBackward() bool { return !o.Unfused }

// dyAmax returns where the fused backward's producers fold the next linear
// layer's dy amax: m.amax for per-tensor recipes on the fused path, else 0
// (nothing folded; gemm computes it).
func (m *Model) dyAmax() cuda.DevicePtr {
	if !m.opts.fusedBackward() || m.layers[0].lin[0].Config().DY.Scaling != fp8.TensorCurrent {
		return 0
	}
	return m.amax
}

// dgradBF16 reports whether linear layer i writes its input gradient in
// bfloat16: with ActGradBF16 all but attn.proj, whose dx attention reads
// in float32 except with AttentionCuDNN, which reads it in bfloat16
// (cudnnLinear).
func (o Options) dgradBF16(i int) bool {
	if i == projL {
		return o.Attention == AttentionCuDNN
	}
	return o.ActGradBF16
}
