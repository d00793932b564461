// Package bf16 provides the exact conversions between float32 and
// bfloat16 (stored as its uint16 bit pattern) that distopt's gradients,
// moments, high-precision parameters and collectives use: round to nearest
// even, overflow to ±Inf, every NaN to the canonical NaN that the GPU's
// cvt.rn.bf16.f32 instruction produces.
package bf16
