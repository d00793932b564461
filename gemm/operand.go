package gemm

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// Layout says how an FP8 operand's scale_inv values are stored.
type Layout int

const (
	// PerTensor: one float32 (fp8.TensorCurrent, fp8.TensorDelayed).
	PerTensor Layout = iota + 1
	// Tiles128: one float32 per 128x128 tile, the grid row-major
	// [ceil(Rows/128)][ceil(Cols/128)] (fp8.Block128x128 as the optimizer
	// gathers it).
	Tiles128
	// Rows128: one float32 per run of 128 elements along a row, the scale of
	// block k of row r at ScaleInv[k*Rows + r] (cuBLASLt's VEC128_32F
	// layout, as Quantize writes it).
	Rows128
	// Flat128: fp8.Block1x128, one float32 per run of 128 elements of the
	// flattened matrix. Only the fallback reads it.
	Flat128
	// MX32: fp8.MXFP8, one E8M0 byte per run of 32 elements of the
	// flattened matrix. Only the fallback reads it.
	MX32
)

var layoutNames = [...]string{PerTensor: "PerTensor", Tiles128: "Tiles128", Rows128: "Rows128", Flat128: "Flat128", MX32: "MX32"}

func (l Layout) String() string {
	if l >= PerTensor && l <= MX32 {
		return layoutNames[l]
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// TensorCores reports whether Hopper's FP8 tensor cores read the layout
// directly (PerTensor, Tiles128, Rows128); the others go through the
// dequantizing fallback.
func (l Layout) TensorCores() bool { return l == PerTensor || l == Tiles128 || l == Rows128 }

// LayoutOf returns the layout of a recipe's scales.
func LayoutOf(r fp8.Recipe) (Layout, error) {
	switch r.Scaling {
	case fp8.TensorCurrent, fp8.TensorDelayed:
		return PerTensor, nil
	case fp8.Block128x128:
		return Tiles128, nil
	case fp8.Block1x128:
		return Flat128, nil
	case fp8.MXFP8:
		return MX32, nil
	}
	return 0, fmt.Errorf("%w: recipe %v", ErrLayout, r)
}

// Operand is an FP8 matrix in device memory: Rows x Cols codes, row-major,
// with its scale_inv values. With Transposed set, Data holds the matrix's
// transpose (row-major Cols x Rows) and the scales are those of that
// stored matrix: the K-major form of an activation that the weight
// gradient reads (see WGrad).
type Operand struct {
	Data       cuda.DevicePtr
	Rows, Cols int
	Transposed bool
	Format     fp8.Format
	Scales     Layout
	ScaleInv   cuda.DevicePtr
}

func (o Operand) String() string {
	t := ""
	if o.Transposed {
		t = " stored transposed"
	}
	return fmt.Sprintf("%dx%d %v %v%s", o.Rows, o.Cols, o.Format, o.Scales, t)
}

// stored returns the shape of the bytes: rows x cols of the row-major data.
func (o Operand) stored() (rows, cols int) {
	if o.Transposed {
		return o.Cols, o.Rows
	}
	return o.Rows, o.Cols
}

// Weight returns the operand of a 2-D FP8 parameter as the optimizer
// gathered it: its bytes and scale_inv in place, no copy.
func Weight(v optimizer.ParamView) (Operand, error) {
	if v.HighPrecision {
		return Operand{}, fmt.Errorf("%w: %q is a high-precision parameter", ErrLayout, v.Name)
	}
	if len(v.Shape) != 2 {
		return Operand{}, fmt.Errorf("%w: %q has shape %v, want [out, in]", ErrShape, v.Name, v.Shape)
	}
	l, err := LayoutOf(v.Recipe)
	if err != nil {
		return Operand{}, err
	}
	data, ok1 := v.Data.(buffer.DeviceBuffer)
	scales, ok2 := v.ScaleInv.(buffer.DeviceBuffer)
	if !ok1 || !ok2 {
		return Operand{}, fmt.Errorf("%w: %q is not in device memory", ErrLayout, v.Name)
	}
	return Operand{Data: cuda.DevicePtr(data.Ptr), Rows: v.Shape[0], Cols: v.Shape[1], Format: v.Format,
		Scales: l, ScaleInv: cuda.DevicePtr(scales.Ptr)}, nil
}

// Output is a high-precision result matrix in device memory, row-major.
type Output struct {
	Data cuda.DevicePtr
	Type buffer.DType // buffer.BFloat16 or buffer.Float32
	// Accumulate adds the product to what Data holds (beta = 1), for
	// gradients summed over micro-batches; otherwise Data is overwritten.
	// Into bfloat16, cuBLASLt 13.1 was seen to round the product to
	// bfloat16 before adding (two roundings); float32 gradients avoid it.
	Accumulate bool
}

// Gradient returns the output that writes a weight gradient into the
// optimizer's gradient view, in place, accumulating when accumulate is set.
func Gradient(v optimizer.GradView, accumulate bool) (Output, error) {
	b, ok := v.Data.(buffer.DeviceBuffer)
	if !ok {
		return Output{}, fmt.Errorf("%w: gradient of %q is not in device memory", ErrLayout, v.Name)
	}
	return Output{Data: cuda.DevicePtr(b.Ptr), Type: v.DType, Accumulate: accumulate}, nil
}

// BF16 returns an output of bfloat16 at p that is overwritten.
func BF16(p cuda.DevicePtr) Output { return Output{Data: p, Type: buffer.BFloat16} }
