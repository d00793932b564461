package gemm

// Product names one of the three products of a linear layer.
type Product int

const (
	ForwardProduct Product = iota + 1 // Forward: y = x · wᵀ
	DGradProduct                      // DGrad: dx = dy · w
	WGradProduct                      // WGrad: dw += dyᵀ · x
)

// Scratch returns the bytes of scratch the engine needs for product p of
// operands a and b (x and w for ForwardProduct, dy and w for DGradProduct,
// dy and x for WGradProduct): what Result.Scratch reports and what the
// engine's buffer grows to, before the fixed WorkspaceBytes.
//
//   - tensor cores, operands already K-major (forward; weight gradient from
//     transposed activations): 0, or a padded copy of a tile grid whose
//     rows are not a multiple of 4 tiles;
//   - data gradient: the transposed weight, out x in bytes, and for
//     Tiles128 its transposed tile grid;
//   - weight gradient from row-major PerTensor or Tiles128 activations:
//     their transposes, T x (out + in) bytes;
//   - fallback: 2 bytes per element of both operands (bfloat16 copies).
//
// Each product uses its scratch and drops it: a model's peak is the
// largest single product's, not a sum over layers.
func Scratch(p Product, a, b Operand) int {
	switch p {
	case ForwardProduct:
		return scratchNeed(a, true, b, true)
	case DGradProduct:
		return scratchNeed(a, true, b, false)
	case WGradProduct:
		return scratchNeed(a, false, b, false)
	}
	return 0
}

// scratchNeed is Scratch for operands presented with k along their columns
// (lCols, rCols) or rows.
func scratchNeed(lo Operand, lCols bool, ro Operand, rCols bool) int {
	if !lo.Scales.TensorCores() || !ro.Scales.TensorCores() {
		return alignUp(2*lo.Rows*lo.Cols) + alignUp(2*ro.Rows*ro.Cols)
	}
	return sideNeed(lo, lCols) + sideNeed(ro, rCols)
}
