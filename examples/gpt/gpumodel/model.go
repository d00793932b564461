package gpumodel

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer"
)

// Params gives a parameter's gathered view (optimizer.Optimizer.Param).
type Params func(name string) (optimizer.ParamView, error)

// Grads gives a parameter's gradient view (optimizer.Optimizer.Grad).
type Grads func(name string) (optimizer.GradView, error)

var (
	actRecipe  = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	gradRecipe = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}
)

// layer holds one block's activations.
type layer struct {
	x, ln1, mean1, rstd1, qkv, p, att cuda.DevicePtr
	x2, ln2, mean2, rstd2, fc, gelu   cuda.DevicePtr
	ln1q, attq, ln2q, geluq           gemm.Operand // FP8 inputs of the linear layers
}

// Model is the model on one device for micro-batches of batch x seq tokens.
// It is not safe for concurrent use.
type Model struct {
	cfg               model.Config
	batch, seq, rows  int
	d                 *cuda.Device
	s                 *cuda.Stream
	k                 *kernels.Set
	e                 *gemm.Engine
	layers            []layer
	xf, lnf, meanf    cuda.DevicePtr
	rstdf, logits     cuda.DevicePtr
	losses, tok, tgt  cuda.DevicePtr
	order, start      cuda.DevicePtr
	dx, dln, dtmp     cuda.DevicePtr
	dqkv, ds, dfc, dg cuda.DevicePtr
	dyC, dy3C, dyF    gemm.Operand
	tokens            []int32
	ptrs              []cuda.DevicePtr
	ops               []gemm.Operand
	attn              *attention
}

// New allocates the model's buffers on the engine's device; k must be
// loaded on the same device. seq may be below cfg.Seq. batch·seq, and the
// hidden and FFN sizes, must be multiples of 16 (the FP8 GEMMs' rule).
func New(e *gemm.Engine, k *kernels.Set, cfg model.Config, batch, seq int) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if seq < 1 || seq > cfg.Seq || batch < 1 || (batch*seq)%16 != 0 || cfg.Hidden%16 != 0 || cfg.FFN%16 != 0 {
		return nil, fmt.Errorf("gpumodel: batch %d x seq %d (context %d), hidden %d, FFN %d: sizes must be positive, tokens, hidden and FFN multiples of 16",
			batch, seq, cfg.Seq, cfg.Hidden, cfg.FFN)
	}
	m := &Model{cfg: cfg, batch: batch, seq: seq, rows: batch * seq, d: k.Device(), s: e.Stream(), k: k, e: e}
	if err := m.alloc(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func (m *Model) alloc() error {
	n, h, f, v := m.rows, m.cfg.Hidden, m.cfg.FFN, m.cfg.Vocab
	pn := m.batch * m.cfg.Heads * m.seq * m.seq
	var err error
	buf := func(elems int) cuda.DevicePtr {
		if err != nil {
			return 0
		}
		var p cuda.DevicePtr
		if p, err = m.d.Alloc(4 * max(elems, 1)); err == nil {
			m.ptrs = append(m.ptrs, p)
		}
		return p
	}
	op := func(rows, cols int, f fp8.Format) gemm.Operand {
		if err != nil {
			return gemm.Operand{}
		}
		var o gemm.Operand
		if o, err = gemm.AllocOperand(m.d, rows, cols, f, gemm.PerTensor, false); err == nil {
			m.ops = append(m.ops, o)
		}
		return o
	}
	for range m.cfg.Layers {
		m.layers = append(m.layers, layer{
			x: buf(n * h), ln1: buf(n * h), mean1: buf(n), rstd1: buf(n), qkv: buf(n * 3 * h), p: buf(pn), att: buf(n * h),
			x2: buf(n * h), ln2: buf(n * h), mean2: buf(n), rstd2: buf(n), fc: buf(n * f), gelu: buf(n * f),
			ln1q: op(n, h, fp8.E4M3), attq: op(n, h, fp8.E4M3), ln2q: op(n, h, fp8.E4M3), geluq: op(n, f, fp8.E4M3),
		})
	}
	m.xf, m.lnf, m.meanf, m.rstdf, m.logits = buf(n*h), buf(n*h), buf(n), buf(n), buf(n*v)
	m.losses, m.tok, m.tgt, m.order, m.start = buf(n), buf(n), buf(n), buf(n), buf(v+1)
	m.dx, m.dln, m.dtmp = buf(n*h), buf(n*h), buf(n*h)
	m.dqkv, m.ds, m.dfc, m.dg = buf(n*3*h), buf(pn), buf(n*f), buf(n*f)
	m.dyC, m.dy3C, m.dyF = op(n, h, fp8.E5M2), op(n, 3*h, fp8.E5M2), op(n, f, fp8.E5M2)
	if err == nil {
		m.attn, err = newAttention(m.k, m.batch, m.seq, h, m.cfg.Heads, attnPrecisionM, attnLayoutM)
	}
	return err
}

// Close frees the model's buffers.
func (m *Model) Close() error {
	var errs []error
	for _, p := range m.ptrs {
		errs = append(errs, m.d.Free(p))
	}
	for _, o := range m.ops {
		errs = append(errs, gemm.FreeOperand(m.d, o))
	}
	errs = append(errs, m.attn.close())
	m.ptrs, m.ops, m.attn = nil, nil, nil
	return errors.Join(errs...)
}

// hp returns the device address of a high-precision parameter gathered in
// bfloat16.
func hp(params Params, name string) (cuda.DevicePtr, error) {
	v, err := params(name)
	if err != nil {
		return 0, err
	}
	b, ok := v.Data.(collective.DeviceBuffer)
	if !v.HighPrecision || v.DType != collective.BFloat16 || !ok {
		return 0, fmt.Errorf("gpumodel: %s must be a high-precision parameter gathered in bfloat16 in device memory (is %v, high precision %v)", name, v.DType, v.HighPrecision)
	}
	return cuda.DevicePtr(b.Ptr), nil
}

// gradPtr returns the device address of a float32 gradient.
func gradPtr(grads Grads, name string) (cuda.DevicePtr, error) {
	v, err := grads(name)
	if err != nil {
		return 0, err
	}
	b, ok := v.Data.(collective.DeviceBuffer)
	if v.DType != collective.Float32 || !ok {
		return 0, fmt.Errorf("gpumodel: the gradient of %s must be float32 in device memory (is %v)", name, v.DType)
	}
	return cuda.DevicePtr(b.Ptr), nil
}

// ZeroGrads clears every gradient view; call it before a step's first
// micro-batch (every gradient is accumulated).
func (m *Model) ZeroGrads(grads Grads) error {
	for _, p := range m.cfg.Params() {
		g, err := gradPtr(grads, p.Name)
		if err != nil {
			return err
		}
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		if err := m.s.Memset32(g, 0, n); err != nil {
			return err
		}
	}
	return nil
}

func lname(l int, s string) string { return fmt.Sprintf("layer%d.%s", l, s) }

// linear runs y = x·Wᵀ + b for the named layer: x (float32 [rows, in]) is
// quantized into xq, which the weight gradient reads later.
func (m *Model) linear(params Params, name string, y, x cuda.DevicePtr, xq gemm.Operand, out int) error {
	if err := m.e.Quantize(xq, x, collective.Float32, actRecipe, 0, 0); err != nil {
		return err
	}
	v, err := params(name + ".weight")
	if err != nil {
		return err
	}
	w, err := gemm.Weight(v)
	if err != nil {
		return err
	}
	if _, err := m.e.Forward(gemm.Output{Data: y, Type: collective.Float32}, xq, w); err != nil {
		return fmt.Errorf("gpumodel: %s: %w", name, err)
	}
	b, err := hp(params, name+".bias")
	if err != nil {
		return err
	}
	return m.k.GPTBiasAdd(m.s, y, b, m.rows, out)
}

// Loss downloads the mean loss of the last Forward.
func (m *Model) Loss() (float64, error) {
	l := make([]float32, m.rows)
	if err := m.s.Download(cuda.Bytes(l), m.losses); err != nil {
		return 0, err
	}
	s := 0.0
	for _, v := range l {
		s += float64(v)
	}
	return s / float64(m.rows), nil
}

// upload checks and uploads a micro-batch's tokens and targets.
func (m *Model) upload(tokens, targets []int32) error {
	if len(tokens) != m.rows || len(targets) != m.rows {
		return fmt.Errorf("gpumodel: %d tokens and %d targets, want %d", len(tokens), len(targets), m.rows)
	}
	for i := range tokens {
		if tokens[i] < 0 || int(tokens[i]) >= m.cfg.Vocab || targets[i] < 0 || int(targets[i]) >= m.cfg.Vocab {
			return fmt.Errorf("gpumodel: token %d or target %d at %d outside the vocabulary", tokens[i], targets[i], i)
		}
	}
	m.tokens = append(m.tokens[:0], tokens...)
	if err := m.s.Upload(m.tok, cuda.Bytes(tokens)); err != nil {
		return err
	}
	return m.s.Upload(m.tgt, cuda.Bytes(targets))
}
