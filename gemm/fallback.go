package gemm

import (
	"fmt"

	"github.com/distopt/distopt/internal/cublaslt"
	icuda "github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
)

// fallback runs a product whose operands the tensor cores cannot read (MX32
// or Flat128 scales on either side): each operand is dequantized, as it is
// stored, into a bfloat16 scratch buffer (fp8 decode times scale_inv,
// rounded to bfloat16) and the product runs in BF16 with FP32
// accumulation. Scratch: 2 bytes per element of both operands, one product
// at a time, never more than one layer's weight.
func (e *Engine) fallback(out Output, lo Operand, lCols bool, ro Operand, rCols bool) (Result, error) {
	e.mark(StageGEMM)
	need := scratchNeed(lo, lCols, ro, rCols)
	if err := e.reserve(need); err != nil {
		return Result{}, err
	}
	a := &arena{base: e.scratch}
	l, err := e.dequantized(a, lo, lCols)
	if err != nil {
		return Result{}, err
	}
	r, err := e.dequantized(a, ro, rCols)
	if err != nil {
		return Result{}, err
	}
	return Result{Path: FallbackDequantBF16, Scratch: need}, e.nt(out, l, r)
}

// dequantized writes o, as stored, in bfloat16 into scratch and describes
// it with k along o's columns (kIsCols) or rows.
func (e *Engine) dequantized(a *arena, o Operand, kIsCols bool) (side, error) {
	rows, cols := o.stored()
	n := rows * cols
	kind, block := kernels.ScaleTensor, 0
	switch o.Scales {
	case Tiles128:
		kind = kernels.ScaleTiles
	case Flat128:
		kind, block = kernels.ScaleBlocks, 128
	case MX32:
		kind, block = kernels.ScaleE8M0, 32
	case Rows128:
		kind, block = kernels.ScaleRows128, rows
	case PerTensor:
	default:
		return side{}, fmt.Errorf("%w: %v", ErrLayout, o.Scales)
	}
	p := a.take(2 * n)
	if err := e.k.DequantBF16(e.s, p, icuda.DevicePtr(o.Data), n, o.Format, icuda.DevicePtr(o.ScaleInv), kind, block, cols); err != nil {
		return side{}, err
	}
	sd := side{data: p, outer: rows, k: cols, kMajor: true, typ: cublaslt.R16BF}
	if kIsCols == o.Transposed { // the bytes lie [k, outer]
		sd.outer, sd.k, sd.kMajor = cols, rows, false
	}
	return sd, nil
}
