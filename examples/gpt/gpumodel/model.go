package gpumodel

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/optimizer"
)

// Params gives a parameter's gathered view (optimizer.Optimizer.Param).
type Params func(name string) (optimizer.ParamView, error)

// Grads gives a parameter's gradient view (optimizer.Optimizer.Grad).
type Grads func(name string) (optimizer.GradView, error)

// The four linear layers of a block, in forward order.
const (
	qkvL  = iota // attn.qkv, input LN1(x)
	projL        // attn.proj, input the attention output
	fcL          // mlp.fc, input LN2(x2)
	outL         // mlp.proj, input GELU(fc)
	nLinear
)

var linearNames = [nLinear]string{"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"}

// ParseLinearLayers returns the linear layers a comma-separated list
// names ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"), as
// Options.KeepTransposedLayers takes them; nil for "". A name that is no
// linear layer of a block is refused.
func ParseLinearLayers(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	names := strings.Split(s, ",")
	if err := checkLinearLayers(names); err != nil {
		return nil, fmt.Errorf("gpumodel: %w", err)
	}
	return names, nil
}

// checkLinearLayers refuses a name that is none of linearNames.
func checkLinearLayers(names []string) error {
	for _, name := range names {
		if !slices.Contains(linearNames[:], name) {
			return fmt.Errorf("no linear layer %q in a block (want some of %q)", name, linearNames)
		}
	}
	return nil
}

// linearShape returns the input and output sizes of linear layer i.
func linearShape(cfg model.Config, i int) (in, out int) {
	h, f := cfg.Hidden, cfg.FFN
	return [nLinear]int{h, h, h, f}[i], [nLinear]int{3 * h, h, f, h}[i]
}

// recomputed reports whether linear layer i's input is recomputed in
// backward under Recompute (LayerNorm and GELU outputs).
func recomputed(i int) bool { return i != projL }

// layer holds what one block keeps from forward to backward (see Memory).
type layer struct {
	x, mean1, rstd1, x2, mean2, rstd2 cuda.DevicePtr        // float32: the residual stream, LayerNorm statistics
	qkv, fc                           cuda.DevicePtr        // bfloat16: the linear outputs attention and GELU read
	p                                 cuda.DevicePtr        // what attention keeps (attnKeptBytes)
	lin                               [nLinear]*gemm.Linear // hold the FP8 linear inputs
}

// Model is the model on one device for micro-batches of batch x seq tokens.
// It is not safe for concurrent use.
type Model struct {
	cfg              model.Config
	opts             Options
	batch, seq, rows int
	d                *cuda.Device
	s                *cuda.Stream
	k                *kernels.Set
	e                *gemm.Engine
	prof             *Profiler // SetProfiler's, or nil
	into             bool      // in BackwardInto: the linear weights' gradients are written
	layers           []layer
	// kept outside the blocks (Final)
	xf, lnf, meanf, rstdf, logits, dlogits, losses cuda.DevicePtr
	// shared transient buffers (Scratch): one block's LayerNorm, attention
	// and GELU outputs (the fused forward writes no LayerNorm or GELU
	// output, and folds amaxes into amax instead), the gradients, the
	// token indices; in Forward dqkv and dfc take the float32 products of
	// the qkv and fc layers before their bias and rounding to bfloat16
	// (not with Options.Epilogue, whose GEMMs write qkv and fc); with
	// AttentionCuDNN no att, and dtmp and Backward's dqkv in bfloat16
	// (cudnnScratch)
	ln, att, gelu, amax cuda.DevicePtr
	tok, tgt            cuda.DevicePtr
	order, start        cuda.DevicePtr
	dx, dln, dtmp       cuda.DevicePtr
	dqkv, ds, dfc, dg   cuda.DevicePtr
	dhead               cuda.DevicePtr // HeadBF16: the head's part of the embedding's gradient, before rounding
	head                *headGEMMs     // HeadBF16: the head's products on the tensor cores
	gsum                cuda.DevicePtr // bfloat16 gradient views: the small parameters' float32 sums (grads.go)
	gsumAt              map[string][2]int
	gsumLen             int
	ptrs                []cuda.DevicePtr
	grad                bool      // the last Forward left dlogits for Backward
	alloc               [nCat]int // bytes the model allocated, by category
	device              int       // the device allocator's count of the same, and of the kept inputs
	attn                *attention
	act                 *actScales // Options.DelayedActivations's state (nil without it)
	// pinned host memory (staging.go): the upload slots and the loss
	// read-backs, all of them and those not in flight
	up                [uploadSlots]*staging
	upNext            int
	lossAll, lossFree []*staging
}

// New is NewWith with zero Options (flash attention: head widths 64 and
// 128 only).
func New(e *gemm.Engine, k *kernels.Set, cfg model.Config, batch, seq int) (*Model, error) {
	return NewWith(e, k, cfg, batch, seq, Options{})
}

// NewWith allocates the model's buffers on the engine's device; k must be
// loaded on the same device. seq may be below cfg.Seq. batch·seq, and the
// hidden and FFN sizes, must be multiples of 16 (the FP8 GEMMs' rule).
// With Options.Attention AttentionFlash (the default) the head width must
// be 64 or 128; other widths are refused, naming AttentionGEMM. The
// linear layers allocate their kept inputs at the first Forward.
func NewWith(e *gemm.Engine, k *kernels.Set, cfg model.Config, batch, seq int, o Options) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if seq < 1 || seq > cfg.Seq || batch < 1 || (batch*seq)%16 != 0 || cfg.Hidden%16 != 0 || cfg.FFN%16 != 0 {
		return nil, fmt.Errorf("gpumodel: batch %d x seq %d (context %d), hidden %d, FFN %d: sizes must be positive, tokens, hidden and FFN multiples of 16",
			batch, seq, cfg.Seq, cfg.Hidden, cfg.FFN)
	}
	if o.Recipe != (fp8.Recipe{}) {
		if _, _, err := ActivationRecipes(o.Recipe); err != nil {
			return nil, err
		}
	}
	if err := o.check(cfg, batch, seq); err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, opts: o, batch: batch, seq: seq, rows: batch * seq, d: k.Device(), s: e.Stream(), k: k, e: e}
	before := m.d.Usage().DeviceBytes
	err := m.allocate()
	m.device = m.d.Usage().DeviceBytes - before
	if err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Memory categories of the model's own buffers.
const (
	catSaved   = iota // float32 and bfloat16 tensors kept per layer
	catProbs          // attention probabilities kept per layer
	catFinal          // kept outside the blocks
	catScratch        // shared, transient
	nCat
)

func (m *Model) allocate() error {
	n, h, f, v := m.rows, m.cfg.Hidden, m.cfg.FFN, m.cfg.Vocab
	prec := m.opts.attnPrecision()
	kept := attnKeptBytes(m.batch, m.seq, h, m.cfg.Heads, prec)
	ds := m.batch * m.cfg.Heads * m.seq * m.seq // the score gradient's scratch, none for flash
	if prec.fused() {
		ds = 0
	}
	var err error
	// buf allocates a buffer of bytes bytes in category cat.
	buf := func(cat, bytes int) cuda.DevicePtr {
		if err != nil {
			return 0
		}
		var p cuda.DevicePtr
		if p, err = m.d.Alloc(max(bytes, 4)); err == nil {
			m.ptrs = append(m.ptrs, p)
			m.alloc[cat] += max(bytes, 4)
		}
		return p
	}
	const sv, fi, sc = catSaved, catFinal, catScratch
	for range m.cfg.Layers {
		m.layers = append(m.layers, layer{
			x: buf(sv, 4*n*h), mean1: buf(sv, 4*n), rstd1: buf(sv, 4*n), qkv: buf(sv, 2*n*3*h), p: buf(catProbs, kept),
			x2: buf(sv, 4*n*h), mean2: buf(sv, 4*n), rstd2: buf(sv, 4*n), fc: buf(sv, 2*n*f),
		})
	}
	m.xf, m.lnf, m.meanf, m.rstdf = buf(fi, 4*n*h), buf(fi, 4*n*h), buf(fi, 4*n), buf(fi, 4*n)
	m.logits, m.dlogits, m.losses = buf(fi, 4*n*v), buf(fi, 4*n*v), buf(fi, 4*n)
	att, dtmp, dqkv := cudnnScratch(n, h, m.opts)
	if att > 0 {
		m.att = buf(sc, att)
	}
	if m.opts.fused() || m.opts.fusedBackward() {
		m.amax = buf(sc, 4)
	}
	m.allocActScales(buf)
	if !m.opts.fused() {
		m.ln, m.gelu = buf(sc, 4*n*h), buf(sc, 4*n*f)
	}
	m.tok, m.tgt, m.order, m.start = buf(sc, 4*n), buf(sc, 4*n), buf(sc, 4*n), buf(sc, 4*(v+1))
	m.dx, m.dln, m.dtmp = buf(sc, 4*n*h), buf(sc, 4*n*h), buf(sc, dtmp)
	m.dfc = buf(sc, 4*n*f)
	m.dqkv = m.dfc
	if !dqkvInDFC(n, f, dqkv) {
		m.dqkv = buf(sc, dqkv)
	}
	if m.opts.ActGradBF16 { // bfloat16 dfc and dg share what Forward uses in float32
		m.dg = m.dfc.Add(2 * n * f)
	} else {
		m.dg = buf(sc, 4*n*f)
	}
	if ds > 0 {
		m.ds = buf(sc, 4*ds)
	}
	if m.opts.Head == HeadBF16 && err == nil {
		m.dhead = buf(sc, 4*v*h)
		if e := m.allocHead(buf); e != nil && err == nil { // buf's own failures are in err already
			err = e
		}
	}
	if m.opts.bf16Grads() {
		m.gsumAt, m.gsumLen = gradSumLayout(m.cfg)
		m.gsum = buf(sc, 4*m.gsumLen)
	}
	if err == nil {
		err = m.zeroActScales()
	}
	if err == nil {
		m.attn, err = newAttention(m.k, m.batch, m.seq, h, m.cfg.Heads, prec, attnLayoutM)
	}
	if err == nil {
		err = m.attn.setQKVBF16()
	}
	if err == nil {
		m.alloc[catScratch] += attnScratchBytes(m.batch, m.seq, h, m.cfg.Heads, prec, attnLayoutM)
	}
	return err
}

// Close frees the model's buffers and its linear layers' kept inputs.
func (m *Model) Close() error {
	// Nothing queued may still read or write what is freed below (the
	// staging copies included).
	errs := []error{m.s.Synchronize()}
	for _, p := range m.ptrs {
		errs = append(errs, m.d.Free(p))
	}
	for i := range m.layers {
		for _, l := range m.layers[i].lin {
			if l != nil {
				errs = append(errs, l.Release())
			}
		}
	}
	if m.attn != nil {
		errs = append(errs, m.attn.close())
	}
	if m.head != nil {
		errs = append(errs, m.head.close())
	}
	errs = append(errs, m.freeStaging())
	m.ptrs, m.layers, m.attn, m.head = nil, nil, nil, nil
	return errors.Join(errs...)
}

// ActivationRecipes returns the recipes of the linear layers' inputs (E4M3)
// and output gradients (E5M2) for weights of recipe w: per-tensor current
// scaling for per-tensor weights (current or delayed: activations are
// always scaled from their own amax), 1x128 blocks along the rows for
// 128x128 weight tiles (DeepSeek-V3's scheme, on the tensor cores). 1x128
// and MXFP8 weights, which Hopper's tensor cores cannot read, take
// per-tensor activations and run on gemm's dequantizing BF16 fallback.
func ActivationRecipes(w fp8.Recipe) (x, dy fp8.Recipe, err error) {
	x, dy = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}
	switch w.Scaling {
	case fp8.TensorCurrent, fp8.TensorDelayed, fp8.Block1x128, fp8.MXFP8:
	case fp8.Block128x128:
		x.Scaling, dy.Scaling = fp8.Block1x128, fp8.Block1x128
	default:
		return x, dy, fmt.Errorf("gpumodel: no activation recipe for weights of recipe %v", w)
	}
	return x, dy, nil
}

// linearConfig returns the configuration of linear layer i.
func linearConfig(cfg model.Config, o Options, i int) (gemm.LinearConfig, error) {
	x, dy, err := ActivationRecipes(o.Recipe)
	if err != nil {
		return gemm.LinearConfig{}, err
	}
	in, out := linearShape(cfg, i)
	c := gemm.LinearConfig{In: in, Out: out, Input: buffer.Float32, X: x, DY: dy}
	if o.ActGradBF16 && i == fcL {
		c.GradInput = buffer.BFloat16 // GELU's gradient
	}
	if o.Attention == AttentionCuDNN {
		cudnnLinear(&c, i)
	}
	if o.FuseDY {
		if dy.Scaling != fp8.TensorCurrent {
			return gemm.LinearConfig{}, fmt.Errorf("gpumodel: Options.FuseDY casts per-tensor output gradients only, not the %v activations of weights of recipe %v", dy.Scaling, o.Recipe)
		}
		c.CallerCastsDY = true
	}
	c.Recompute = o.Recompute && recomputed(i)
	c.KeepTransposed = (o.KeepTransposed || slices.Contains(o.KeepTransposedLayers, linearNames[i])) && !c.Recompute
	return c, nil
}

// linears makes the linear layers at the first Forward, taking the recipe
// from the gathered weights when Options has none, and checks the weights'
// scale layout at every Forward.
func (m *Model) linears(params Params) error {
	v, err := params(lname(0, linearNames[qkvL]) + ".weight")
	if err != nil {
		return err
	}
	if m.opts.Recipe == (fp8.Recipe{}) {
		m.opts.Recipe = v.Recipe
	}
	want, err1 := gemm.LayoutOf(m.opts.Recipe)
	got, err2 := gemm.LayoutOf(v.Recipe)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("gpumodel: %w", err)
	}
	if got != want {
		return fmt.Errorf("gpumodel: weights gathered with recipe %v, the model was made for %v (Options.Recipe)", v.Recipe, m.opts.Recipe)
	}
	if len(m.layers) == 0 || m.layers[0].lin[0] != nil {
		return nil
	}
	for l := range m.layers {
		for i := range nLinear {
			c, err := linearConfig(m.cfg, m.opts, i)
			if err != nil {
				return err
			}
			if m.layers[l].lin[i], err = m.e.NewLinear(c); err != nil {
				return fmt.Errorf("gpumodel: %s: %w", lname(l, linearNames[i]), err)
			}
		}
	}
	return nil
}

// hp returns the device address of a high-precision parameter gathered in
// bfloat16.
func hp(params Params, name string) (cuda.DevicePtr, error) {
	v, err := params(name)
	if err != nil {
		return 0, err
	}
	b, ok := v.Data.(buffer.DeviceBuffer)
	if !v.HighPrecision || v.DType != buffer.BFloat16 || !ok {
		return 0, fmt.Errorf("gpumodel: %s must be a high-precision parameter gathered in bfloat16 in device memory (is %v, high precision %v)", name, v.DType, v.HighPrecision)
	}
	return cuda.DevicePtr(b.Ptr), nil
}

// weight returns the gathered FP8 weight of the named linear layer.
func weight(params Params, name string) (gemm.Operand, error) {
	v, err := params(name + ".weight")
	if err != nil {
		return gemm.Operand{}, err
	}
	op, err := gemm.Weight(v.Data, v.ScaleInv, v.Shape, v.Recipe)
	if err != nil {
		return gemm.Operand{}, fmt.Errorf("gpumodel: %s: %w", v.Name, err)
	}
	return op, nil
}

// ZeroGrads clears every gradient view; call it before a step's first
// micro-batch (Backward accumulates every gradient), or run that
// micro-batch's backward pass with BackwardInto instead.
func (m *Model) ZeroGrads(grads Grads) error {
	return m.onWorker(func() error { return m.zeroGrads(grads, nil) })
}

// isLinearWeight reports whether the parameter named name is a linear
// layer's weight, whose gradient a GEMM writes whole.
func isLinearWeight(name string) bool {
	return strings.HasPrefix(name, "layer") && slices.ContainsFunc(linearNames[:], func(l string) bool {
		return strings.HasSuffix(name, "."+l+".weight")
	})
}

// zeroGrads clears the gradient view of every parameter but those skip
// reports (nil: none).
func (m *Model) zeroGrads(grads Grads, skip func(name string) bool) error {
	m.mark(PhaseOptimizer)
	t := m.opts.gradType()
	for _, p := range m.cfg.Params() {
		if skip != nil && skip(p.Name) {
			continue
		}
		g, err := viewPtr(grads, p.Name, t)
		if err != nil {
			return err
		}
		n := t.Size()
		for _, d := range p.Shape {
			n *= d
		}
		if n%4 != 0 || g%4 != 0 { // bfloat16 views of odd lengths or offsets
			err = m.s.Memset8(g, 0, n)
		} else {
			err = m.s.Memset32(g, 0, n/4)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func lname(l int, s string) string { return fmt.Sprintf("layer%d.%s", l, s) }

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

// Logits downloads the logits of the last Forward into dst, row-major
// [batch·seq, vocab] float32 (row b·seq + t: sequence b, position t).
func (m *Model) Logits(dst []float32) error {
	if want := m.rows * m.cfg.Vocab; len(dst) != want {
		return fmt.Errorf("gpumodel: Logits into %d floats, want %d x %d = %d", len(dst), m.rows, m.cfg.Vocab, want)
	}
	return m.s.Download(cuda.Bytes(dst), m.logits)
}
