package gemm

import (
	"fmt"

	"github.com/distopt/distopt/fp8"
)

// Path says how a product ran.
type Path int

const (
	// TensorCores: cuBLASLt's FP8 kernels read the operands (and their
	// scales) as they are, or through an exact transient transpose.
	TensorCores Path = iota + 1
	// FallbackDequantBF16: a layout the H200's tensor cores cannot read
	// (MX32, Flat128) was dequantized, one operand at a time, into a
	// bfloat16 scratch buffer and multiplied in BF16 (FP32 accumulation).
	FallbackDequantBF16
)

func (p Path) String() string {
	switch p {
	case TensorCores:
		return "TensorCores"
	case FallbackDequantBF16:
		return "FallbackDequantBF16"
	}
	return fmt.Sprintf("Path(%d)", int(p))
}

// Result reports how a product ran and the scratch it used.
type Result struct {
	Path    Path
	Scratch int // bytes of scratch the product used (transposes, grids, dequantized copies)
}

// Forward queues y[T, out] = x[T, in] · w[out, in]ᵀ, the forward product of
// a linear layer: x the quantized input (Rows128 or PerTensor, stored
// row-major), w the weight as gathered (Tiles128 or PerTensor: read in
// place; Flat128, MX32: fallback).
func (e *Engine) Forward(y Output, x, w Operand) (Result, error) {
	if x.Cols != w.Cols {
		return Result{}, fmt.Errorf("%w: forward of x %v by w %v: inner dimensions differ", ErrShape, x, w)
	}
	return e.product(y, x, true, w, true)
}

// DGrad queues dx[T, in] = dy[T, out] · w[out, in], the data gradient. On
// the tensor cores w is transposed exactly into scratch (and its tile grid
// with it), used, and dropped: the extra memory is one layer's weight, out
// x in bytes, never a cached copy.
func (e *Engine) DGrad(dx Output, dy, w Operand) (Result, error) {
	if dy.Cols != w.Rows {
		return Result{}, fmt.Errorf("%w: data gradient of dy %v by w %v: dy has %d columns, w %d rows", ErrShape, dy, w, dy.Cols, w.Rows)
	}
	return e.product(dx, dy, true, w, false)
}

// WGrad queues dw[out, in] (+)= dy[T, out]ᵀ · x[T, in], the weight
// gradient, into dw (use Gradient for the optimizer's gradient view and
// accumulation across micro-batches). Both inputs are read with T
// contiguous: operands stored Transposed are read in place; PerTensor and
// Tiles128 operands stored row-major are transposed exactly into scratch;
// Rows128 operands must come stored Transposed (see Quantize), since a
// transpose does not keep 1x128 blocks.
func (e *Engine) WGrad(dw Output, dy, x Operand) (Result, error) {
	if dy.Rows != x.Rows {
		return Result{}, fmt.Errorf("%w: weight gradient of dy %v and x %v: token counts differ", ErrShape, dy, x)
	}
	return e.product(dw, dy, false, x, false)
}

// product queues out = L·Rᵀ where L is lo presented with k along its
// columns (lCols) or rows, and R likewise. Everything runs in one call to
// the device's worker thread: a product's launches cost one hand-off, not
// one each.
func (e *Engine) product(out Output, lo Operand, lCols bool, ro Operand, rCols bool) (Result, error) {
	if err := out.check(); err != nil {
		return Result{}, err
	}
	var res Result
	err := e.d.Do(func() error {
		var err error
		res, err = e.queue(out, lo, lCols, ro, rCols)
		return err
	})
	return res, err
}

// queue is product on the worker thread.
func (e *Engine) queue(out Output, lo Operand, lCols bool, ro Operand, rCols bool) (Result, error) {
	if !lo.Scales.TensorCores() || !ro.Scales.TensorCores() {
		return e.fallback(out, lo, lCols, ro, rCols)
	}
	if !pairOK(lo.Scales, ro.Scales) {
		return Result{}, fmt.Errorf("%w: %v with %v: cuBLASLt takes per-tensor scales on both sides, or block scales on both with at most one 128x128 side", ErrLayout, lo.Scales, ro.Scales)
	}
	if err := checkFP8(out, lo, lCols, ro, rCols); err != nil {
		return Result{}, err
	}
	need := scratchNeed(lo, lCols, ro, rCols)
	if err := e.reserve(need); err != nil {
		return Result{}, err
	}
	a := &arena{base: e.scratch}
	l, err := e.kmajor(a, lo, lCols)
	if err != nil {
		return Result{}, err
	}
	r, err := e.kmajor(a, ro, rCols)
	if err != nil {
		return Result{}, err
	}
	return Result{Path: TensorCores, Scratch: need}, e.nt(out, l, r)
}

// checkFP8 applies the shape rules of cuBLASLt's FP8 kernels before asking
// it: the contiguous dimension K of both inputs a multiple of 16 (16-byte
// leading dimensions), the output's rows 16-byte aligned, and E5M2 on at
// most one side.
func checkFP8(out Output, lo Operand, lCols bool, ro Operand, rCols bool) error {
	k, q := lo.Rows, ro.Cols // q: the output's columns, the outer dimension of R
	if lCols {
		k = lo.Cols
	}
	if rCols {
		q = ro.Rows
	}
	switch {
	case k%16 != 0:
		return fmt.Errorf("%w: FP8 tensor cores need the shared dimension a multiple of 16, it is %d", ErrShape, k)
	case q*out.Type.Size()%16 != 0:
		return fmt.Errorf("%w: FP8 tensor cores need output rows of a multiple of 16 bytes: %d %v columns", ErrShape, q, out.Type)
	case lo.Format == fp8.E5M2 && ro.Format == fp8.E5M2:
		return fmt.Errorf("%w: cuBLASLt has no E5M2 x E5M2 kernel: make one side E4M3", ErrLayout)
	}
	return nil
}
