package gemm

import (
	"errors"
	"fmt"
	"math"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	icuda "github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
)

// ScaleBytes returns the bytes of scale_inv an operand of the given stored
// shape and layout has.
func ScaleBytes(rows, cols int, l Layout) int {
	switch l {
	case PerTensor:
		return 4
	case Rows128:
		return 4 * rows * ceilDiv(cols, 128)
	case Tiles128:
		return 4 * ceilDiv(rows, 128) * ceilDiv(cols, 128)
	case Flat128:
		return 4 * ceilDiv(rows*cols, 128)
	case MX32:
		return ceilDiv(rows*cols, 32)
	}
	return 0
}

// AllocOperand allocates on d an operand of rows x cols codes (stored
// transposed when transposed is set) with room for its scales. Free it
// with FreeOperand.
func AllocOperand(d *cuda.Device, rows, cols int, f fp8.Format, l Layout, transposed bool) (Operand, error) {
	o := Operand{Rows: rows, Cols: cols, Transposed: transposed, Format: f, Scales: l}
	sr, sc := o.stored()
	var err error
	if o.Data, err = d.Alloc(max(rows*cols, 1)); err != nil {
		return Operand{}, err
	}
	if o.ScaleInv, err = d.Alloc(ScaleBytes(sr, sc, l)); err != nil {
		d.Free(o.Data)
		return Operand{}, err
	}
	return o, nil
}

// FreeOperand releases what AllocOperand allocated.
func FreeOperand(d *cuda.Device, o Operand) error {
	return errors.Join(d.Free(o.Data), d.Free(o.ScaleInv))
}

func elem(t buffer.DType) (kernels.Elem, error) {
	switch t {
	case buffer.Float32:
		return kernels.F32, nil
	case buffer.BFloat16:
		return kernels.BF16, nil
	}
	return 0, fmt.Errorf("%w: input type %v, want Float32 or BFloat16", ErrLayout, t)
}

// Quantize queues the cast of the row-major dst.Rows x dst.Cols matrix at
// src (Float32 or BFloat16) into dst with recipe r, bit for bit as the fp8
// package casts it:
//
//   - PerTensor, fp8.TensorCurrent: the amax of src, fp8.ScaleFromAmax on
//     the device, fp8.CastScaled; scale_inv written to dst.ScaleInv.
//   - PerTensor, fp8.TensorDelayed: fp8.CastScaled with scale (from an
//     fp8.AmaxHistory); 1/scale written to dst.ScaleInv.
//   - Rows128, fp8.Block1x128: fp8.CastBlocks1D applied to each row; with
//     dst.Transposed, to each column, written transposed (the K-major form
//     the weight gradient reads).
//
// When amax is not 0 the amax bits of src are folded into the uint32 there
// (zero it first), for a delayed-scaling history. Scales never travel
// through the host.
func (e *Engine) Quantize(dst Operand, src cuda.DevicePtr, t buffer.DType, r fp8.Recipe, scale float32, amax cuda.DevicePtr) error {
	return e.d.Do(func() error { return e.quantize(dst, icuda.DevicePtr(src), t, r, scale, icuda.DevicePtr(amax)) })
}

// quantize is Quantize on the worker thread.
func (e *Engine) quantize(dst Operand, src icuda.DevicePtr, t buffer.DType, r fp8.Recipe, scale float32, amax icuda.DevicePtr) error {
	e.mark(StageQuantize)
	el, err := elem(t)
	if err != nil {
		return err
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Format != dst.Format {
		return fmt.Errorf("%w: recipe %v for an operand of format %v", ErrLayout, r, dst.Format)
	}
	n := dst.Rows * dst.Cols
	switch {
	case dst.Scales == PerTensor && !dst.Transposed && r.Scaling == fp8.TensorCurrent:
		scale, err := e.currentScale(src, n, el, 0, r, icuda.DevicePtr(dst.ScaleInv))
		if err != nil {
			return err
		}
		return e.k.QuantCast(e.s, icuda.DevicePtr(dst.Data), src, n, el, r.Format, scale, amax)
	case dst.Scales == PerTensor && !dst.Transposed && r.Scaling == fp8.TensorDelayed:
		if err := e.s.Memset32(e.aux.Add(4), math.Float32bits(scale), 1); err != nil {
			return err
		}
		if err := e.s.Memset32(icuda.DevicePtr(dst.ScaleInv), math.Float32bits(1/scale), 1); err != nil {
			return err
		}
		return e.k.QuantCast(e.s, icuda.DevicePtr(dst.Data), src, n, el, r.Format, e.aux.Add(4), amax)
	case dst.Scales == Rows128 && r.Scaling == fp8.Block1x128:
		if dst.Transposed {
			return e.k.QuantCols128(e.s, icuda.DevicePtr(dst.Data), icuda.DevicePtr(dst.ScaleInv), dst.Cols, src, dst.Rows, dst.Cols, el, r.Format, r.Margin, r.PowerOf2, amax)
		}
		return e.k.QuantRows128(e.s, icuda.DevicePtr(dst.Data), icuda.DevicePtr(dst.ScaleInv), dst.Rows, src, dst.Rows, dst.Cols, el, r.Format, r.Margin, r.PowerOf2, amax)
	}
	return fmt.Errorf("%w: cannot quantize %v with %v (per tensor: TensorCurrent or TensorDelayed, not transposed; Rows128: Block1x128)", ErrLayout, dst, r)
}

// currentScale queues the scale of per-tensor current scaling for the n
// elements at src: their amax key folded into the engine's aux word, or,
// when amax is not 0, the key the caller holds there; fp8.ScaleFromAmax
// of it into the next word, whose address it returns; its inverse to
// scaleInv.
func (e *Engine) currentScale(src icuda.DevicePtr, n int, el kernels.Elem, amax icuda.DevicePtr, r fp8.Recipe, scaleInv icuda.DevicePtr) (icuda.DevicePtr, error) {
	if amax == 0 {
		amax = e.aux
		if err := e.s.Memset32(amax, 0, 1); err != nil {
			return 0, err
		}
		if err := e.k.QuantAmax(e.s, src, n, el, amax); err != nil {
			return 0, err
		}
	}
	scale := e.aux.Add(4)
	return scale, e.k.QuantScale(e.s, amax, scale, scaleInv, r.Format, r.Margin, r.PowerOf2)
}

// Transpose queues the exact transpose of a PerTensor or Tiles128 operand
// into dst, which must have the same shape, format and layout and the
// opposite Transposed flag (its scales are written too). It serves
// activations kept for the weight gradient when the caller wants the
// transposed copy kept rather than made inside WGrad.
func (e *Engine) Transpose(dst, src Operand) error {
	if dst.Rows != src.Rows || dst.Cols != src.Cols || dst.Transposed == src.Transposed || dst.Format != src.Format || dst.Scales != src.Scales {
		return fmt.Errorf("%w: transpose of %v into %v", ErrShape, src, dst)
	}
	return e.d.Do(func() error { return e.transpose(dst, src) })
}

// transpose is Transpose on the worker thread.
func (e *Engine) transpose(dst, src Operand) error {
	e.mark(StageTranspose)
	rows, cols := src.stored()
	switch src.Scales {
	case PerTensor:
		if err := e.s.CopyDtoD(icuda.DevicePtr(dst.ScaleInv), icuda.DevicePtr(src.ScaleInv), 4); err != nil {
			return err
		}
	case Tiles128:
		if err := e.k.CopyScaleGrid(e.s, icuda.DevicePtr(dst.ScaleInv), ceilDiv(rows, 128), icuda.DevicePtr(src.ScaleInv), ceilDiv(cols, 128), ceilDiv(rows, 128), ceilDiv(cols, 128), true); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: %v scales do not survive a transpose", ErrLayout, src.Scales)
	}
	return e.k.TransposeFP8(e.s, icuda.DevicePtr(dst.Data), icuda.DevicePtr(src.Data), rows, cols)
}
