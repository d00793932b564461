// Package fp8 provides the FP8 formats E4M3 and E5M2, exact conversions
// between them and float32 (and between float32 and bfloat16), the scaling
// recipes of Transformer Engine (per-tensor current and delayed scaling,
// 1x128 and 128x128 block scaling, MXFP8 with E8M0 scales), and the FP8
// tensor view type.
//
// The pure-Go functions of this package are the specification: the GPU
// kernels of distopt must agree with them bit for bit.
package fp8
