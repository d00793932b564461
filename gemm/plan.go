package gemm

// Product names one of the three products of a linear layer.
type Product int

const (
	ForwardProduct Product = iota + 1 // Forward: y = x · wᵀ
	DGradProduct                      // DGrad: dx = dy · w
	WGradProduct                      // WGrad: dw += dyᵀ · x
)

// Scratch returns the scratch bytes the engine needs for product p of a and
// b: x and w for ForwardProduct, dy and w for DGradProduct, dy and x for
// WGradProduct. Result.Scratch reports it, without the fixed WorkspaceBytes.
//
//   - tensor cores, operands already K-major, as in forward: 0, or a copy of
//     a tile grid padded to rows of a multiple of 4 tiles;
//   - data gradient: the transposed weight, out x in bytes, and its tile grid;
//   - weight gradient from row-major activations: T x (out + in) bytes;
//   - fallback: 2 bytes per element of both operands.
//
// A product drops its scratch, so a model's peak is its largest product's.
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
