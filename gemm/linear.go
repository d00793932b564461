package gemm

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	icuda "github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
)

// LinearConfig describes a linear layer y[T, out] = x[T, in] · w[out, in]ᵀ
// whose input is kept for backward in FP8.
type LinearConfig struct {
	In, Out int
	// Input is the element type of x (Forward, Restore) and dy (Backward):
	// buffer.BFloat16 (the default, when zero) or buffer.Float32.
	// Quantization reads either directly, bit for bit as the fp8 package
	// casts the same values.
	Input buffer.DType
	// GradInput, when not zero, is the element type of dy in Backward
	// instead of Input (BFloat16 or Float32): a layer whose input is
	// float32 may take a bfloat16 output gradient.
	GradInput buffer.DType
	// X quantizes the layer's input: fp8.TensorCurrent (PerTensor scales,
	// with PerTensor weights) or fp8.Block1x128 (1x128 blocks along rows,
	// with Tiles128 weights), usually E4M3.
	X fp8.Recipe
	// DY quantizes the output gradient in Backward: the same scaling as X,
	// usually E5M2.
	DY fp8.Recipe
	// KeepTransposed keeps the transposed FP8 input, made in Forward, until
	// Backward: twice the memory kept, no transpose in Backward.
	KeepTransposed bool
	// Recompute keeps nothing between Forward and Backward: Forward
	// quantizes x into the engine's shared buffer, and before Backward the
	// caller recomputes x (a LayerNorm or GELU output, say) and hands it
	// back with Restore, which Backward quantizes again. Quantization is a
	// function of x alone, so the bits are those of a kept input when the
	// recomputed x equals Forward's. Not with KeepTransposed.
	Recompute bool
	// CallerCastsDY has the caller cast the output gradient (BackwardCast):
	// a kernel of the caller's writes dy's FP8 codes row-major and
	// transposed in one pass, and may fold its own work on dy into that
	// pass (the bias gradient's column sums, say), where Backward casts dy
	// and the weight gradient transposes the codes, each reading again.
	// The transposed codes take tokens*Out bytes of the engine's
	// activation buffer, which the weight gradient's transpose no longer
	// takes from its product scratch. Per-tensor current scaling only;
	// Backward and BackwardAmax are refused.
	CallerCastsDY bool
}

// input returns the element type of x and dy.
func (c LinearConfig) input() buffer.DType {
	if c.Input == 0 {
		return buffer.BFloat16
	}
	return c.Input
}

// gradInput returns the element type of dy.
func (c LinearConfig) gradInput() buffer.DType {
	if c.GradInput == 0 {
		return c.input()
	}
	return c.GradInput
}

// layout returns the scale layout of the layer's activations.
func (c LinearConfig) layout() Layout {
	if c.X.Scaling == fp8.Block1x128 {
		return Rows128
	}
	return PerTensor
}

func (c LinearConfig) validate() error {
	if c.In < 16 || c.Out < 16 || c.In%16 != 0 || c.Out%16 != 0 {
		return fmt.Errorf("%w: linear %d -> %d: FP8 tensor cores need both sizes multiples of 16", ErrShape, c.In, c.Out)
	}
	for _, r := range []fp8.Recipe{c.X, c.DY} {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("gemm: linear: %w", err)
		}
		if r.Scaling != fp8.TensorCurrent && r.Scaling != fp8.Block1x128 {
			return fmt.Errorf("%w: linear activations take fp8.TensorCurrent or fp8.Block1x128, not %v", ErrLayout, r)
		}
	}
	for _, t := range []buffer.DType{c.input(), c.gradInput()} {
		if t != buffer.BFloat16 && t != buffer.Float32 {
			return fmt.Errorf("%w: linear input or output gradient type %v, want BFloat16 or Float32", ErrLayout, t)
		}
	}
	if c.Recompute && c.KeepTransposed {
		return fmt.Errorf("%w: linear: Recompute keeps no input and KeepTransposed two copies: choose one", ErrLayout)
	}
	if c.CallerCastsDY && c.DY.Scaling != fp8.TensorCurrent {
		return fmt.Errorf("%w: linear CallerCastsDY with output gradients of %v: the caller's cast takes per-tensor current scaling only", ErrLayout, c.DY)
	}
	if c.X.Scaling != c.DY.Scaling {
		return fmt.Errorf("%w: linear input %v and output gradient %v scale differently", ErrLayout, c.X, c.DY)
	}
	return nil
}

// Linear is one linear layer on an Engine. Forward quantizes its input
// once and keeps only that FP8 copy (1 byte per element plus scales) for
// Backward; Backward makes the transposed input the weight gradient reads
// transiently, in the engine's shared buffers, unless KeepTransposed asks
// to keep it from Forward; with Recompute it keeps nothing and Backward
// quantizes the input given back by Restore. The kept buffers stay
// allocated after Backward
// for the next step (freeing would synchronize the device); Release frees
// them. A Linear must not be used from two goroutines at once, nor
// concurrently with other users of its engine.
type Linear struct {
	e      *Engine
	c      LinearConfig
	tokens int
	x, xT  Operand         // kept: x as Forward quantized it; its transpose with KeepTransposed
	w      Layout          // the weight layout of the last Forward
	ready  bool            // Forward ran, Backward not yet
	src    icuda.DevicePtr // with Recompute: the input given back by Restore
}

// NewLinear returns a linear layer on e; nothing is allocated before the
// first Forward.
func (e *Engine) NewLinear(c LinearConfig) (*Linear, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Linear{e: e, c: c}, nil
}

// Config returns the layer's configuration.
func (l *Linear) Config() LinearConfig { return l.c }

// Forward quantizes x (row-major [tokens, in] of the configured Input
// type) into the layer's kept FP8 input, with KeepTransposed also its
// transpose (with Recompute into the engine's shared buffer, kept by
// nobody), and queues y[tokens, out] = x · wᵀ with w the gathered weight
// (see Weight). tokens must be a multiple of 16 (the weight gradient's
// shared dimension).
func (l *Linear) Forward(y Output, x cuda.DevicePtr, tokens int, w Operand) (Result, error) {
	return l.forward(y, tokens, w, func(xq Operand) error {
		return l.e.quantize(xq, icuda.DevicePtr(x), l.c.input(), l.c.X, 0, 0)
	})
}

// ForwardQuantized is Forward for an input the caller quantizes, such as
// a producer kernel that writes the FP8 codes of its output without
// writing the output itself (examples/gpt fuses its LayerNorms and GELU
// so). fill, called once on the device's worker (cuda.Device.Do), queues
// on the engine's stream the work that writes x: x.Data, tokens x In
// codes row-major, and x.ScaleInv, in Config().X's format and layout (one
// float32 per tensor for fp8.TensorCurrent, Rows128 blocks for
// fp8.Block1x128), as Quantize would write them. The layer then keeps x
// (with KeepTransposed, its transpose too) and queues the product as
// Forward does. Backward is unchanged. Not with Recompute, whose Backward
// quantizes an input that Restore gives back in high precision.
func (l *Linear) ForwardQuantized(y Output, tokens int, w Operand, fill func(x Operand) error) (Result, error) {
	if l.c.Recompute {
		return Result{}, fmt.Errorf("%w: linear ForwardQuantized with Recompute: Backward would quantize the input again; use Forward", ErrLayout)
	}
	return l.forward(y, tokens, w, fill)
}

// forward runs Forward with fill writing the quantized input.
func (l *Linear) forward(y Output, tokens int, w Operand, fill func(x Operand) error) (Result, error) {
	if err := y.check(); err != nil {
		return Result{}, err
	}
	if err := l.checkWeight(w); err != nil {
		return Result{}, err
	}
	if tokens < 16 || tokens%16 != 0 {
		return Result{}, fmt.Errorf("%w: linear of %d tokens: the weight gradient needs a multiple of 16", ErrShape, tokens)
	}
	if err := l.hold(tokens); err != nil {
		return Result{}, err
	}
	l.ready, l.src = false, 0
	xq := l.x
	err := l.e.d.Do(func() error {
		a, err := l.transient(l.c.forwardScratch)
		if err != nil {
			return err
		}
		if l.c.Recompute {
			xq = a.x
		}
		if err := fill(xq); err != nil {
			return err
		}
		if !l.c.KeepTransposed {
			return nil
		}
		return l.e.transposeActivation(l.xT, l.x, a.tmp, l.c.X)
	})
	if err != nil {
		return Result{}, err
	}
	res, err := l.e.Forward(y, xq, w)
	l.w, l.ready = w.Scales, err == nil
	return res, err
}

// Backward quantizes dy ([tokens, out] of the GradInput type) and queues dx = dy · w
// (DGrad: the weight transposed transiently) and dw (+)= dyᵀ · x (WGrad,
// typically into Gradient(view, accumulate)) from the FP8 input kept by
// the last Forward. Without KeepTransposed the transposed input is made
// here, transiently: exactly for per-tensor scales (in WGrad's scratch),
// and for 1x128 blocks by re-quantizing down the columns the FP8 values
// Forward kept (see transposeActivation). The transposed output gradient
// is made transiently too. With Recompute the input given to Restore is
// first quantized again into the engine's shared buffer. It returns the
// results of the two products.
func (l *Linear) Backward(dx, dw Output, dy cuda.DevicePtr, w Operand) (dgrad, wgrad Result, err error) {
	return l.backward(dx, dw, dy, 0, w, nil)
}

// BackwardAmax is Backward for a dy whose amax the caller knows: amax is
// the device address of a uint32 holding the amax key of dy's values, the
// largest Float32bits(v) & 0x7fffffff (what Quantize's amax pass folds,
// the key of fp8.Amax), written by work queued before on the engine's
// stream, such as the kernel that wrote dy. Backward's own amax pass over
// dy is skipped; the scale comes from that key with fp8.ScaleFromAmax, so
// the bits are Backward's when the key is exact. Per-tensor current
// scaling only (DY fp8.TensorCurrent): 1x128 blocks have no tensor amax
// and are refused (use Backward). amax 0 is Backward.
func (l *Linear) BackwardAmax(dx, dw Output, dy, amax cuda.DevicePtr, w Operand) (dgrad, wgrad Result, err error) {
	if amax != 0 && l.c.DY.Scaling != fp8.TensorCurrent {
		return Result{}, Result{}, fmt.Errorf("%w: linear BackwardAmax with output gradients of %v: a caller's amax serves per-tensor current scaling only", ErrLayout, l.c.DY)
	}
	return l.backward(dx, dw, dy, icuda.DevicePtr(amax), w, nil)
}

// DYCast writes the FP8 codes of a linear layer's output gradient for
// BackwardCast: the code of dy[r, c] * scale (fp8.CastScaled's rule, the
// scale the float32 at scale on the device) at dy8's [r, c], row-major,
// and at dyT8's, stored transposed ([Out, tokens]). Both operands share
// one scale_inv, which gemm writes. It is called on the engine's device
// worker and must queue its work on the engine's stream (Engine.Stream).
type DYCast func(dy8, dyT8 Operand, scale cuda.DevicePtr) error

// BackwardCast is BackwardAmax for a CallerCastsDY layer: gemm derives
// dy's scale (from the amax key at amax, or, when amax is 0, from an amax
// pass over dy [tokens, Out] of the GradInput type), writes scale_inv,
// and cast writes the codes; then the two products run as in Backward,
// the weight gradient reading dyT8 as it is. The bits are Backward's when
// cast writes the codes Backward's cast would.
func (l *Linear) BackwardCast(dx, dw Output, dy, amax cuda.DevicePtr, w Operand, cast DYCast) (dgrad, wgrad Result, err error) {
	if !l.c.CallerCastsDY {
		return Result{}, Result{}, fmt.Errorf("%w: linear BackwardCast without CallerCastsDY: use Backward", ErrLayout)
	}
	if cast == nil {
		return Result{}, Result{}, errors.New("gemm: linear BackwardCast with a nil cast")
	}
	return l.backward(dx, dw, dy, icuda.DevicePtr(amax), w, cast)
}

// backward runs Backward, taking dy's amax key from amax unless it is 0.
func (l *Linear) backward(dx, dw Output, dy cuda.DevicePtr, amax icuda.DevicePtr, w Operand, cast DYCast) (dgrad, wgrad Result, err error) {
	if l.c.CallerCastsDY && cast == nil {
		return Result{}, Result{}, fmt.Errorf("%w: linear Backward of a CallerCastsDY layer: use BackwardCast", ErrLayout)
	}
	if !l.ready {
		return Result{}, Result{}, errors.New("gemm: linear Backward without a Forward since the last Backward")
	}
	if l.c.Recompute && l.src == 0 {
		return Result{}, Result{}, errors.New("gemm: linear Backward of a Recompute layer without Restore")
	}
	if err := l.checkWeight(w); err != nil {
		return Result{}, Result{}, err
	}
	err = l.e.d.Do(func() error {
		t, err := l.transient(l.c.backwardScratch)
		if err != nil {
			return err
		}
		x := l.x
		if l.c.Recompute { // Forward's bits again, from the restored input
			x = t.x
			if err := l.e.quantize(x, l.src, l.c.input(), l.c.X, 0, 0); err != nil {
				return err
			}
		}
		xT := x
		if l.c.KeepTransposed {
			xT = l.xT
		}
		if t.xT.Data != 0 { // first: t.dy and t.dyT overwrite t.tmp
			xT = t.xT
			if err := l.e.transposeActivation(xT, x, t.tmp, l.c.X); err != nil {
				return err
			}
		}
		dyT, err := l.quantizeDY(t, icuda.DevicePtr(dy), amax, cast)
		if err != nil {
			return err
		}
		if dgrad, err = l.e.queue(dx, t.dy, true, w, false); err != nil {
			return err
		}
		wgrad, err = l.e.queue(dw, dyT, false, xT, false)
		return err
	})
	l.ready, l.src = false, 0
	return dgrad, wgrad, err
}

// quantizeDY queues dy's FP8 operands for the two products and returns
// the one the weight gradient reads: for 1x128 blocks, dy quantized along
// the rows into t.dy and down the columns into t.dyT, as Quantize does;
// per tensor, with the scale from the amax key at amax (when it is not 0,
// without an amax pass: the same scale), the codes written into t.dy by
// quant_cast, whose transpose the weight gradient makes, or with cast
// into t.dy and t.dyT by the caller (CallerCastsDY).
func (l *Linear) quantizeDY(t transients, dy, amax icuda.DevicePtr, cast DYCast) (Operand, error) {
	l.e.mark(StageQuantize)
	r, in := l.c.DY, l.c.gradInput()
	if l.c.layout() == Rows128 {
		if err := l.e.quantize(t.dy, dy, in, r, 0, 0); err != nil {
			return Operand{}, err
		}
		return t.dyT, l.e.quantize(t.dyT, dy, in, r, 0, 0)
	}
	el, err := elem(in)
	if err != nil {
		return Operand{}, err
	}
	n := t.dy.Rows * t.dy.Cols
	scale, err := l.e.currentScale(dy, n, el, amax, r, icuda.DevicePtr(t.dy.ScaleInv))
	if err != nil {
		return Operand{}, err
	}
	if cast != nil {
		return t.dyT, cast(t.dy, t.dyT, cuda.DevicePtr(scale))
	}
	return t.dy, l.e.k.QuantCast(l.e.s, icuda.DevicePtr(t.dy.Data), dy, n, el, r.Format, scale, 0)
}

// Restore gives a Recompute layer its input again before Backward: x
// ([tokens, in] of the Input type) must hold, bit for bit, what Forward
// was given (the caller recomputes it), and stay unchanged until Backward
// has been queued, which quantizes it again.
func (l *Linear) Restore(x cuda.DevicePtr) error {
	if !l.c.Recompute {
		return errors.New("gemm: linear Restore without Recompute: the layer keeps its input")
	}
	if !l.ready {
		return errors.New("gemm: linear Restore without a Forward since the last Backward")
	}
	l.src = icuda.DevicePtr(x)
	return nil
}

func (l *Linear) checkWeight(w Operand) error {
	if w.Rows != l.c.Out || w.Cols != l.c.In || w.Transposed {
		return fmt.Errorf("%w: linear %d -> %d given weight %v, want %dx%d row-major", ErrShape, l.c.In, l.c.Out, w, l.c.Out, l.c.In)
	}
	return nil
}

// hold allocates the kept operands for tokens rows, freeing those of
// another token count.
func (l *Linear) hold(tokens int) error {
	if l.tokens == tokens {
		return nil
	}
	if err := l.Release(); err != nil {
		return err
	}
	if l.c.Recompute {
		l.tokens = tokens
		return nil
	}
	x, err := AllocOperand(l.e.device(), tokens, l.c.In, l.c.X.Format, l.c.layout(), false)
	if err != nil {
		return err
	}
	if l.c.KeepTransposed {
		if l.xT, err = AllocOperand(l.e.device(), tokens, l.c.In, l.c.X.Format, l.c.layout(), true); err != nil {
			return errors.Join(err, FreeOperand(l.e.device(), x))
		}
	}
	l.x, l.tokens = x, tokens
	return nil
}

// Release frees the kept operands (after Backward, or to drop a Forward);
// the next Forward allocates them again.
func (l *Linear) Release() error {
	var errs []error
	for _, o := range []*Operand{&l.x, &l.xT} {
		if o.Data != 0 {
			errs = append(errs, l.e.s.Synchronize(), FreeOperand(l.e.device(), *o))
			*o = Operand{}
		}
	}
	l.tokens, l.ready = 0, false
	return errors.Join(errs...)
}

// Kept returns the FP8 input the layer keeps for Backward, as the last
// Forward (or ForwardQuantized) left it, and with KeepTransposed its
// transpose (zero otherwise); zero Operands under Recompute, before the
// first Forward and after Release. For reading them back (tests that
// compare two ways of making the same input); Backward reads them.
func (l *Linear) Kept() (x, xT Operand) { return l.x, l.xT }

// KeptBytes returns the bytes the layer holds for Backward now: its FP8
// input and scales, and with KeepTransposed the transposed copy; 0 before
// the first Forward and after Release.
func (l *Linear) KeptBytes() int {
	n := 0
	for _, o := range []Operand{l.x, l.xT} {
		if o.Data != 0 {
			sr, sc := o.stored()
			n += sr*sc + ScaleBytes(sr, sc, o.Scales)
		}
	}
	return n
}

// Memory returns PlanLinear's figures at the token count and weight
// layout of the last Forward.
func (l *Linear) Memory() (LinearMemory, error) {
	if l.tokens == 0 {
		return LinearMemory{}, errors.New("gemm: linear memory before the first Forward")
	}
	return PlanLinear(l.c, l.tokens, l.w)
}

// transients are the operands one Forward or Backward makes in the
// engine's activation buffer; a zero Data marks one it does not make.
type transients struct {
	x           Operand         // with Recompute: the input, quantized (again)
	dy, dyT, xT Operand         // the quantized output gradient, its transposed form, the remade input
	tmp         icuda.DevicePtr // bfloat16 [tokens, in]: the input dequantized for its re-quantization
}

// transient grows the engine's activation buffer to what lay needs and
// lays the operands out in it.
func (l *Linear) transient(lay func(*arena, int) transients) (transients, error) {
	need := &arena{}
	lay(need, l.tokens)
	if err := l.e.grow(&l.e.act, &l.e.actSize, need.off); err != nil {
		return transients{}, err
	}
	return lay(&arena{base: l.e.act}, l.tokens), nil
}

// takeOperand lays out an operand in a.
func takeOperand(a *arena, rows, cols int, f fp8.Format, lay Layout, transposed bool) Operand {
	o := Operand{Rows: rows, Cols: cols, Transposed: transposed, Format: f, Scales: lay}
	sr, sc := o.stored()
	o.Data, o.ScaleInv = cuda.DevicePtr(a.take(rows*cols)), cuda.DevicePtr(a.take(ScaleBytes(sr, sc, lay)))
	return o
}

// forwardScratch lays out Forward's transients: with Recompute the
// quantized input; with KeepTransposed and 1x128 blocks, the bfloat16
// input the transpose is quantized from.
func (c LinearConfig) forwardScratch(a *arena, tokens int) transients {
	var t transients
	if c.Recompute {
		t.x = takeOperand(a, tokens, c.In, c.X.Format, c.layout(), false)
	}
	if c.KeepTransposed && c.layout() == Rows128 {
		t.tmp = a.take(2 * tokens * c.In)
	}
	return t
}

// backwardScratch lays out Backward's transients: with Recompute first
// the input quantized again (alive throughout); the quantized output
// gradient; with CallerCastsDY its transposed codes (sharing its
// scale_inv); for 1x128 blocks its column-quantized form and, without
// KeepTransposed, the re-quantized transposed input and its bfloat16
// source, which the output gradient's operands overwrite once the input is
// made (the stream orders them).
func (c LinearConfig) backwardScratch(a *arena, tokens int) transients {
	var t transients
	lay := c.layout()
	if c.Recompute {
		t.x = takeOperand(a, tokens, c.In, c.X.Format, lay, false)
	}
	end := 0
	if lay == Rows128 && !c.KeepTransposed {
		t.xT = takeOperand(a, tokens, c.In, c.X.Format, lay, true)
		start := a.off
		t.tmp = a.take(2 * tokens * c.In)
		a.off, end = start, a.off
	}
	t.dy = takeOperand(a, tokens, c.Out, c.DY.Format, lay, false)
	switch {
	case lay == Rows128:
		t.dyT = takeOperand(a, tokens, c.Out, c.DY.Format, lay, true)
	case c.CallerCastsDY: // the caller's transposed codes, sharing dy's scale_inv
		t.dyT = t.dy
		t.dyT.Transposed, t.dyT.Data = true, cuda.DevicePtr(a.take(tokens*c.Out))
	}
	a.off = max(a.off, end)
	return t
}

// transposeActivation writes into dst (stored transposed) the input x as
// Forward quantized it. Per tensor it is Transpose, exact. 1x128 blocks do
// not survive a transpose, and the bfloat16 input is gone: x is decoded
// (code times its block's scale_inv, rounded to bfloat16) into tmp and
// quantized again in 1x128 blocks down the columns, as Quantize does from
// bfloat16. A second rounding, measured in TestRequantizedError.
func (e *Engine) transposeActivation(dst, x Operand, tmp icuda.DevicePtr, r fp8.Recipe) error {
	if x.Scales != Rows128 {
		return e.transpose(dst, x)
	}
	err := e.k.DequantBF16(e.s, tmp, icuda.DevicePtr(x.Data), x.Rows*x.Cols, x.Format, icuda.DevicePtr(x.ScaleInv), kernels.ScaleRows128, x.Rows, x.Cols)
	if err != nil {
		return err
	}
	return e.quantize(dst, tmp, buffer.BFloat16, r, 0, 0)
}
