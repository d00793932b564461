package gemm

import "errors"

var (
	// ErrShape marks operands whose shapes do not fit the product, or that
	// cuBLASLt's FP8 kernels cannot take (see the package doc), and dense
	// products cuBLASLt has no kernel for.
	ErrShape = errors.New("gemm: shape")
	// ErrLayout marks an operand whose scale layout the product cannot use
	// (for example 1x128 row blocks where an exact transpose is needed).
	ErrLayout = errors.New("gemm: scale layout")
	// ErrEpilogue marks a product whose output asks for an epilogue
	// (Output.Bias) that cuBLASLt has no kernel for at that configuration;
	// the error names it. Nothing falls back to a separate pass.
	ErrEpilogue = errors.New("gemm: epilogue not supported")
	// ErrUnavailable wraps the reason the engine (or Dense) could not
	// start: no GPU, no cuBLASLt, or a cuBLASLt too old for block scales.
	ErrUnavailable = errors.New("gemm: FP8 GEMMs unavailable")
)
