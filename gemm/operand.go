package gemm

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
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

// Weight returns the operand of a 2-D FP8 weight in device memory, read
// in place: data holds shape[0] x shape[1] codes of r.Format, row-major,
// and scaleInv its scale_inv values in r's order. An optimizer's gathered
// parameter gives all four: gemm.Weight(v.Data, v.ScaleInv, v.Shape,
// v.Recipe) for an optimizer.ParamView v.
func Weight(data, scaleInv buffer.Buffer, shape []int, r fp8.Recipe) (Operand, error) {
	if scaleInv == nil {
		return Operand{}, fmt.Errorf("%w: a weight without scale_inv (a high-precision parameter?)", ErrLayout)
	}
	if len(shape) != 2 {
		return Operand{}, fmt.Errorf("%w: a weight of shape %v, want [out, in]", ErrShape, shape)
	}
	l, err := LayoutOf(r)
	if err != nil {
		return Operand{}, err
	}
	d, ok1 := data.(buffer.DeviceBuffer)
	scales, ok2 := scaleInv.(buffer.DeviceBuffer)
	if !ok1 || !ok2 {
		return Operand{}, fmt.Errorf("%w: a weight that is not in device memory", ErrLayout)
	}
	return Operand{Data: cuda.DevicePtr(d.Ptr), Rows: shape[0], Cols: shape[1], Format: r.Format,
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
	// Bias, if not 0, is a vector of one element per output column (a
	// linear layer's out), bfloat16, that cuBLASLt's epilogue
	// (CUBLASLT_EPILOGUE_BIAS) adds to every row before the output is
	// written: Data = product + Bias with no pass of its own. cuBLASLt
	// documents the FP8 epilogue as D = Epilogue(scale_A·scale_B·A·B +
	// bias), D then converted to its type. So a bfloat16 output is
	// rounded once, after the addition. The type of that addition and the
	// rounding mode of the conversion are not documented: TestBiasEpilogue
	// measures them against float32 sums rounded to nearest even. Not with
	// Accumulate. Bias must be 2-byte aligned; plans are made per
	// alignment class (the heuristic reads the bias address's alignment).
	// If cuBLASLt has no kernel for the epilogue at that shape and
	// alignment, the product fails with an error that names the
	// configuration: there is no fallback to a separate bias pass.
	Bias cuda.DevicePtr
	// BiasType is the element type of Bias: buffer.BFloat16, or zero for
	// it. cuBLASLt's FP8 kernels with bfloat16 or float32 outputs take no
	// other. Set without Bias, it is refused: a bias was asked for and not
	// given.
	BiasType buffer.DType
}

// check refuses an output the products cannot write: a bias of another
// type than bfloat16, a bias type without a bias, a bias with Accumulate,
// a bias not 2-byte aligned. All match ErrLayout. The output type is
// checked where the product is planned.
func (o Output) check() error {
	switch {
	case o.Bias == 0 && o.BiasType != 0:
		return fmt.Errorf("%w: output asks for a %v bias and gives none (Output.Bias is 0)", ErrLayout, o.BiasType)
	case o.Bias == 0:
		return nil
	case o.BiasType != 0 && o.BiasType != buffer.BFloat16:
		return fmt.Errorf("%w: bias of type %v: cuBLASLt's FP8 epilogue takes a bfloat16 bias", ErrLayout, o.BiasType)
	case o.Accumulate:
		return fmt.Errorf("%w: bias with Accumulate: the epilogue would add the bias at every accumulation", ErrLayout)
	case o.Bias%2 != 0:
		return fmt.Errorf("%w: bias at %#x: bfloat16 needs 2-byte alignment", ErrLayout, uint64(o.Bias))
	}
	return nil
}

// biasAlign returns the alignment of the bias address, up to 256 bytes.
func (o Output) biasAlign() int {
	a := uint64(o.Bias) & -uint64(o.Bias)
	if a == 0 || a > 256 {
		return 256
	}
	return int(a)
}

// Gradient returns the output that writes a weight gradient of type dt
// into dst, in device memory, in place, accumulating when accumulate is
// set: gemm.Gradient(g.Data, g.DType, accumulate) for an optimizer's
// gradient view g.
func Gradient(dst buffer.Buffer, dt buffer.DType, accumulate bool) (Output, error) {
	b, ok := dst.(buffer.DeviceBuffer)
	if !ok {
		return Output{}, fmt.Errorf("%w: a gradient that is not in device memory", ErrLayout)
	}
	return Output{Data: cuda.DevicePtr(b.Ptr), Type: dt, Accumulate: accumulate}, nil
}

// BF16 returns an output of bfloat16 at p that is overwritten.
func BF16(p cuda.DevicePtr) Output { return Output{Data: p, Type: buffer.BFloat16} }

// BF16Bias returns an output of bfloat16 at p, overwritten with the
// product plus the bfloat16 bias vector at bias, one element per output
// column, added in cuBLASLt's epilogue (see Output.Bias).
func BF16Bias(p, bias cuda.DevicePtr) Output {
	return Output{Data: p, Type: buffer.BFloat16, Bias: bias, BiasType: buffer.BFloat16}
}
