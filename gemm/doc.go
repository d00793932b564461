// Package gemm provides the FP8 matrix products of a linear layer Y = X·Wᵀ
// on NVIDIA's cuBLASLt, reading the weights as the optimizer gathers them
// (row-major [out, in] FP8 bytes and their scale_inv, in place) and writing
// weight gradients into the optimizer's gradient buffer.
//
// # Products
//
// An Engine (one device, one stream) runs:
//
//   - Forward: y[T, out] = x[T, in] · w[out, in]ᵀ, bfloat16 (or float32) out;
//   - DGrad: dx[T, in] = dy[T, out] · w, which Hopper's FP8 kernels can only
//     read with w transposed: the engine transposes w exactly (bytes, and
//     its 128x128 tile grid) into scratch, uses it, and drops it: one layer
//     at a time, never a cached transposed copy of the model;
//   - WGrad: dw[out, in] (+)= dyᵀ · x into an Output, typically
//     Gradient(view.Data, view.DType, accumulate) of an optimizer's
//     gradient view, with beta = 1 across micro-batches: no gradient copy
//     is made.
//
// Operands are Operand values: FP8 bytes, shape, format and scale layout.
// Weight makes one of an optimizer's gathered parameter (its Data,
// ScaleInv, Shape and Recipe), in place; Quantize makes activation
// operands from float32 or bfloat16 (per-tensor current or delayed scaling,
// or 1x128 blocks along rows, or down columns for the weight gradient), bit
// for bit as the fp8 package casts them, with the amax folded on the device.
//
// # Recipes on Hopper (H100, H200; cuBLASLt 12.9 or later)
//
//   - fp8.TensorCurrent, fp8.TensorDelayed (PerTensor scales): FP8 tensor
//     cores, every product.
//   - fp8.Block128x128 weights (Tiles128) with 1x128 activation blocks
//     (Rows128, DeepSeek-V3's scheme): FP8 tensor cores (cuBLASLt's
//     BLK128x128_32F and VEC128_32F scale modes); the weight gradient reads
//     both activations in 1x128 blocks along the tokens (quantized down the
//     columns, since a transpose does not keep 1x128 blocks).
//   - fp8.MXFP8 and fp8.Block1x128 weights (MX32, Flat128): Hopper's tensor
//     cores cannot read these scales. The products then run on the
//     FallbackDequantBF16 path, said so in Result.Path: each operand is
//     dequantized (decode times scale_inv, rounded to bfloat16) into
//     scratch, one product at a time, and multiplied in BF16 with FP32
//     accumulation. MXFP8's power-of-two scales make that dequantization
//     exact; 1x128 weight scales round once to bfloat16.
//
// Nothing falls back silently: a layout pair the tensor cores cannot take
// (per-tensor with block scales, 128x128 tiles on both sides, E5M2 on both
// sides) is an error matching ErrLayout; a shared dimension that is not a
// multiple of 16, or output rows that are not a multiple of 16 bytes, an
// error matching ErrShape.
//
// # Memory
//
// The engine holds a fixed cuBLASLt workspace (WorkspaceBytes, 32 MiB) and
// one scratch buffer that grows to the largest single product's need and
// is reused (Scratch predicts it; PeakScratch reports it): the data
// gradient's transposed weight (out x in bytes, plus its tile grid), the
// weight gradient's transposed per-tensor activations (T x (in + out)
// bytes) when they are not given transposed, the fallback's bfloat16
// copies, and a few bytes where a scale_inv pointer is not 16-byte aligned
// (cuBLASLt refuses those; the optimizer's per-tensor scales lie 4 bytes
// apart) or a tile grid's rows must be padded to 4 tiles. Transformer Engine keeps a transposed FP8 copy of every weight on
// Hopper (+1 byte per parameter); here the extra memory is one layer's
// weight, whatever the depth of the model. cmd/distopt-bench-gemm checks it
// with cuMemGetInfo over 24 layers of the 1.3B GPT's shapes.
//
// # Linear layers: activations kept in FP8 once
//
// Linear (Engine.NewLinear) is a layer over these products whose input is
// kept for backward only as the FP8 bytes Forward quantized it into (1
// byte per element plus scales: 0.50x of bfloat16 per tensor, 0.516x with
// 1x128 blocks), never a bfloat16 or second FP8 copy. Backward makes the
// transposed input and output gradient the weight gradient reads
// transiently, in buffers the engine shares between layers: exact
// transposes per tensor; with 1x128 blocks, which a transpose does not
// keep, the kept input is decoded (rounded to bfloat16) and quantized
// again down its columns, a second rounding that raised the weight
// gradient's relative RMS error from 0.024 to 0.035 (1.47x) against
// quantizing the bfloat16 input down its columns (TestRequantizedError).
// With power-of-two scales (Recipe.PowerOf2) the rescaling is exact but
// for values below the normal range of their column block (0.07% of them
// there): the error stays that of the direct quantization (1.00x).
// LinearConfig.KeepTransposed keeps the transposed copy from Forward
// instead (twice the bytes kept, no transpose in Backward, identical
// bits). LinearConfig.Recompute keeps nothing: the caller recomputes the
// input (a LayerNorm or GELU output) and hands it back with Restore, and
// Backward quantizes it again, the same bits. Inputs and output gradients
// are bfloat16 or float32 (LinearConfig.Input). PlanLinear predicts the
// bytes kept per layer and the transient buffers; KeptBytes,
// ActivationScratch and PeakScratch report them.
//
// # Numerics
//
// Products of FP8 values are exact in float32 and accumulate in FP32
// (Hopper's FP8 MMA keeps fewer bits inside one instruction before
// cuBLASLt promotes the partial sums; fast accumulation is off). The
// tests compare every element with a float64 reference computed from the
// decoded FP8 operands within 2^-8 |ref| + 2^-10 sum |a b| (see
// TestProducts for the justification). Transposes and quantization are
// exact and tested bit for bit.
//
// # Speed
//
// On one H200 (cuBLASLt 13.1, 2026-12-01) the products of the 1.3B GPT's
// linear layers (16384 tokens) and 8192^3 run at 1210-1420 TFLOP/s with
// per-tensor scales, the data gradient's transient transpose included:
// 96-104% of torch._scaled_mm given the transposed operands ready, 118-154%
// when torch's own transposes are counted. With 128x128 weight tiles and
// 1x128 activation blocks they run at 960-1310 TFLOP/s, 85-112% of
// torch._scaled_mm's block-scaled products; forward and data gradient stay
// within 10% of per-tensor on all but the QKV shape, while the weight
// gradient's 1x128 x 1x128 kernel runs at about 71-77% of per-tensor (63-74%
// in PyTorch, the same library). See cmd/distopt-bench-gemm.
//
// SetAutotune optionally times several of cuBLASLt's heuristic candidates
// per plan instead of taking its first choice.
//
// # Dense products
//
// Dense (NewDense) runs the other products of a model, such as attention's,
// on the same library: float32 or bfloat16 operands in strided batches of
// column-major matrices (Matrix), float32 results, with exact FP32 or TF32
// products (DenseSpec). It needs no FP8 kernels.
package gemm
