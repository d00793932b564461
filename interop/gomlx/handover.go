package gomlxinterop

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// HandOver moves values between GoMLX tensors and one rank's optimizer:
// gradients into the optimizer's gradient views, gathered weights into the
// variables. It keeps scratch buffers only for averaging micro-batches and
// for optimizer buffers in device memory; it is not safe for concurrent use.
type HandOver struct {
	backend backends.Backend
	opt     *optimizer.Optimizer
	params  []Param
	scratch [][]byte
	srcs    [][]byte
}

// NewHandOver returns the hand-over between params (in gradient order) and
// opt, whose parameters they must be, for tensors of backend.
func NewHandOver(backend backends.Backend, opt *optimizer.Optimizer, params []Param) *HandOver {
	return &HandOver{backend: backend, opt: opt, params: params}
}

// ShareVariables makes the value of every parameter's variable a tensor
// whose memory is shared with the backend (where the backend has shared
// buffers, as simplego does), so that Weights writes where the next graph
// execution reads. It returns whether all of them are shared. The values
// are left as they were.
func (h *HandOver) ShareVariables() (bool, error) {
	if !h.backend.HasSharedBuffers() {
		return false, nil
	}
	for _, p := range h.params {
		old, err := p.Var.Value()
		if err != nil {
			return false, fmt.Errorf("%w: %q: %w", ErrVariable, p.Name, err)
		}
		if old.IsShared() {
			continue
		}
		t := tensors.FromShape(old.Shape())
		if err := t.MaterializeOnDevice(h.backend, true, 0); err != nil {
			return false, fmt.Errorf("gomlxinterop: sharing %q with the backend: %w", p.Name, err)
		}
		err = tensors.ConstFlatData(old, func(src []float32) {
			tensors.MustMutableFlatData(t, func(dst []float32) { copy(dst, src) })
		})
		if err == nil {
			err = p.Var.SetValue(t)
		}
		if err != nil {
			return false, fmt.Errorf("gomlxinterop: sharing %q with the backend: %w", p.Name, err)
		}
	}
	return true, nil
}

// Weights writes the parameters as the optimizer gathered them (FP8
// dequantized with scale_inv, or the high-precision copy) into the
// variables, transposing those of Layout Transposed. With shared
// variables this is the only write.
func (h *HandOver) Weights() error {
	for _, p := range h.params {
		t, err := p.Var.Value()
		if err != nil {
			return fmt.Errorf("%w: %q: %w", ErrVariable, p.Name, err)
		}
		var werr error
		err = tensors.MutableFlatData(t, func(flat []float32) {
			if p.Layout == Transposed {
				werr = h.opt.WeightsIntoTransposed(flat, p.Name)
			} else {
				werr = h.opt.WeightsInto(flat, p.Name)
			}
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			return fmt.Errorf("gomlxinterop: weights of %q: %w", p.Name, err)
		}
	}
	return nil
}

// Grads writes one batch's gradients (in the order of the parameters) into
// the optimizer's gradient views, converted to its gradient type and laid
// out as the parameters are.
func (h *HandOver) Grads(grads []*tensors.Tensor) error {
	return h.MeanGrads([][]*tensors.Tensor{grads})
}

// MeanGrads writes the average of several micro-batches' gradients into the
// gradient views, computed as the communicator averages the ranks'
// gradients (each rounded to the gradient type, then collective.Reduce's
// Avg in micro-batch order), so that one rank fed d micro-batches holds
// the same gradients as d ranks fed one each. micro[k] holds micro-batch
// k's gradients in the order of the parameters.
func (h *HandOver) MeanGrads(micro [][]*tensors.Tensor) error {
	if len(micro) == 0 {
		return fmt.Errorf("%w: no gradients", ErrHandOver)
	}
	for k, gs := range micro {
		if len(gs) != len(h.params) {
			return fmt.Errorf("%w: micro-batch %d has %d gradients for %d parameters", ErrHandOver, k, len(gs), len(h.params))
		}
	}
	for i, p := range h.params {
		v, err := h.opt.Grad(p.Name)
		if err != nil {
			return err
		}
		n := v.Data.Len()
		out, host := v.Data.(buffer.HostBuffer)
		if !host {
			out = h.buffer(len(micro), n) // staged, then written to the device
		}
		if len(micro) == 1 {
			err = h.encode(out, v.DType, p, micro[0][i])
		} else {
			h.srcs = h.srcs[:0]
			for k := range micro {
				b := h.buffer(k, n)
				if err = h.encode(b, v.DType, p, micro[k][i]); err != nil {
					break
				}
				h.srcs = append(h.srcs, b)
			}
			if err == nil {
				collective.Reduce(out, h.srcs, v.DType, collective.Avg)
			}
		}
		if err == nil && !host {
			err = h.opt.Backend().Write(v.Data, 0, out)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// buffer returns scratch buffer k with n bytes.
func (h *HandOver) buffer(k, n int) []byte {
	for len(h.scratch) <= k {
		h.scratch = append(h.scratch, nil)
	}
	h.scratch[k] = slices.Grow(h.scratch[k][:0], n)[:n]
	return h.scratch[k]
}

// encode converts the gradient g of p into dst, elements of dt in p's
// layout, reading g's memory in place where the backend shares it.
func (h *HandOver) encode(dst []byte, dt buffer.DType, p Param, g *tensors.Tensor) error {
	dims := p.Var.Shape().Dimensions
	if !slices.Equal(g.Shape().Dimensions, dims) || g.DType() != p.Var.DType() {
		return fmt.Errorf("%w: gradient of %q is %s, the variable %s", ErrHandOver, p.Name, g.Shape(), p.Var.Shape())
	}
	rows, cols := 1, g.Size()
	if p.Layout == Transposed {
		rows, cols = split(dims)
	}
	return withFlat(h.backend, g, func(src []float32) { encodeTransposed(dst, dt, src, rows, cols) })
}

// encodeTransposed writes the rows x cols row-major matrix src into dst as
// elements of dt (Float32, or BFloat16 rounded to nearest even), laid out
// as its cols x rows transpose: element (r, c) goes to c*rows+r. With one
// row that is a plain conversion. It walks 32x32 tiles so that both sides
// stay in cache.
func encodeTransposed(dst []byte, dt buffer.DType, src []float32, rows, cols int) {
	const tile = 32
	for r0 := 0; r0 < rows; r0 += tile {
		for c0 := 0; c0 < cols; c0 += tile {
			for r := r0; r < min(r0+tile, rows); r++ {
				row := src[r*cols : (r+1)*cols]
				if dt == buffer.Float32 {
					for c := c0; c < min(c0+tile, cols); c++ {
						binary.LittleEndian.PutUint32(dst[4*(c*rows+r):], math.Float32bits(row[c]))
					}
					continue
				}
				for c := c0; c < min(c0+tile, cols); c++ {
					binary.LittleEndian.PutUint16(dst[2*(c*rows+r):], fp8.BF16FromFloat32(row[c]))
				}
			}
		}
	}
}

// withFlat calls fn with t's float32 values: the backend's own buffer when
// the backend shares its memory (no copy), else GoMLX's local copy.
func withFlat(backend backends.Backend, t *tensors.Tensor, fn func([]float32)) error {
	if !backend.HasSharedBuffers() || t.IsShared() || !t.IsOnAnyDevice() {
		return tensors.ConstFlatData(t, fn)
	}
	buf, err := t.Buffer(backend, 0)
	if err != nil {
		return fmt.Errorf("gomlxinterop: reading a gradient: %w", err)
	}
	flat, err := backend.BufferData(buf)
	if err != nil {
		return fmt.Errorf("gomlxinterop: reading a gradient: %w", err)
	}
	f, ok := flat.([]float32)
	if !ok {
		return fmt.Errorf("%w: gradient buffer holds %T, not []float32", ErrHandOver, flat)
	}
	fn(f)
	return nil
}
