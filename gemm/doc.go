// Package gemm provides the FP8 matrix products of a linear layer,
// Y = X·Wᵀ, on NVIDIA's cuBLASLt. It reads the weights in place, as the
// optimizer gathers them: row-major [out, in] FP8 bytes and their scale_inv.
// It writes the weight gradients into the optimizer's gradient buffer.
//
// # Products
//
// An Engine runs on one device and one stream. It must not be used from two
// goroutines at once. It runs three products:
//
//   - Forward: y[T, out] = x[T, in] · w[out, in]ᵀ, in bfloat16 or float32;
//   - DGrad: dx[T, in] = dy[T, out] · w;
//   - WGrad: dw[out, in] (+)= dyᵀ · x, into an Output.
//
// Hopper's FP8 kernels read w only transposed. So DGrad transposes w
// exactly, with its 128x128 tile grid, into scratch, uses it, and drops it.
// There is never a cached transposed copy of the model. WGrad usually writes
// into Gradient(view.Data, view.DType, accumulate), a gradient view of the
// optimizer. Across micro-batches it adds, with beta = 1. No gradient copy
// is made.
//
// Operands are Operand values: FP8 bytes, shape, format and scale layout.
// Weight makes one of a gathered parameter, in place, from its Data,
// ScaleInv, Shape and Recipe. Quantize makes activation operands from
// float32 or bfloat16, bit for bit as the fp8 package casts them. It scales
// per tensor, current or delayed, or in 1x128 blocks along rows or down
// columns. The amax is folded on the device.
//
// # Recipes on Hopper
//
// This needs an H100 or H200, and cuBLASLt 12.9 or later.
//
//   - fp8.TensorCurrent and fp8.TensorDelayed, with PerTensor scales: FP8
//     tensor cores, for every product.
//   - fp8.Block128x128 weights (Tiles128) with 1x128 activation blocks
//     (Rows128), DeepSeek-V3's scheme: FP8 tensor cores. The weight gradient
//     reads both activations in 1x128 blocks along the tokens.
//   - fp8.MXFP8 and fp8.Block1x128 weights (MX32, Flat128): Hopper's tensor
//     cores cannot read these scales. The products run on the
//     FallbackDequantBF16 path, and Result.Path says so.
//
// The fallback dequantizes each operand into scratch, one product at a time.
// It decodes, multiplies by scale_inv and rounds to bfloat16. Then it
// multiplies in BF16 with FP32 accumulation. MXFP8's power-of-two scales make
// its dequantization exact. 1x128 weight scales round once to bfloat16.
//
// Nothing falls back silently. A layout pair the tensor cores cannot take is
// an error matching ErrLayout: per-tensor with block scales, 128x128 tiles on
// both sides, or E5M2 on both sides. A shared dimension that is not a
// multiple of 16 is an error matching ErrShape, and so are output rows that
// are not a multiple of 16 bytes.
//
// # Memory
//
// An Engine holds a fixed cuBLASLt workspace of WorkspaceBytes, 32 MiB. It
// also holds one scratch buffer, reused by every product. The buffer grows to
// the largest single product's need: one layer's transposed weight, at most.
// Scratch predicts that need, and PeakScratch reports it. A model's extra
// memory is thus one layer's weight, whatever its depth.
//
// # Linear layers
//
// Linear, made by Engine.NewLinear, is a layer over these products. It keeps
// its input for Backward only as the FP8 bytes Forward made. That is 0.50x of
// bfloat16 per tensor, and 0.516x with 1x128 blocks. Backward makes the
// transposes it needs transiently, in buffers the layers share. They are
// exact per tensor. With 1x128 blocks the kept input is quantized again down
// its columns, which adds a rounding. With power-of-two scales it is exact,
// but for values below the normal range of their column block.
//
// LinearConfig.KeepTransposed keeps the transposed copy from Forward instead:
// twice the bytes, the same bits. LinearConfig.Recompute keeps nothing: the
// caller recomputes the input and hands it back with Restore, and Backward
// quantizes it again, to the same bits. The input and output gradient are
// bfloat16 or float32 (LinearConfig.Input). PlanLinear predicts the bytes
// kept and the transient buffers. KeptBytes, ActivationScratch and
// PeakScratch report them.
//
// # Numerics
//
// Products of FP8 values are exact in float32, and they accumulate in FP32.
// Fast accumulation is off. The tests compare every element with a float64
// reference, within 2^-8 |ref| + 2^-10 sum |a b|. Transposes and
// quantization are exact, and tested bit for bit.
//
// # Bias in the epilogue
//
// An Output with a Bias (BF16Bias) has cuBLASLt add a bfloat16 vector, one
// element per output column, in the product's epilogue
// (CUBLASLT_EPILOGUE_BIAS). A linear layer's y = x·wᵀ + b is then written
// once, in bfloat16, with no float32 product and no bias pass. cuBLASLt
// documents the result as the scaled product plus the bias, converted to
// the output's type: one rounding to bfloat16, after the addition. It does
// not document the type of the addition or the rounding mode: the GPU
// tests compare with float32 sums rounded to nearest even, within one
// bfloat16 ulp. The epilogue is part of the plan's key. A configuration
// cuBLASLt has no kernel for is an error matching ErrEpilogue that names
// it; nothing falls back to a separate pass. cuBLASLt 13 (measured
// 2026-12-05 on an H200) refuses a bias that is only 2-byte aligned: a
// model's biases must then sit at 16-byte aligned addresses.
//
// By default an Engine takes cuBLASLt's first heuristic choice. SetAutotune
// times several candidates per plan instead.
//
// See docs/DESIGN.md, "Note: FP8 GEMMs", for the transposes, the accuracy
// bound and the measured speed.
//
// # Dense products
//
// Dense, made by NewDense, runs a model's other products on the same
// library, such as attention's. Its operands are float32 or bfloat16 strided
// batches of column-major matrices (Matrix). Results are float32. DenseSpec
// chooses exact FP32 or TF32 products. Dense needs no FP8 kernels.
package gemm
