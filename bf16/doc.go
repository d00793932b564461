// Package bf16 converts exactly between float32 and bfloat16.
//
// A bfloat16 is held as its uint16 bit pattern. distopt's gradients, moments,
// high-precision parameters and collectives all use these conversions.
// Rounding is to nearest even, and overflow gives ±Inf. Every NaN becomes
// the canonical NaN, the one the GPU's cvt.rn.bf16.f32 instruction produces.
package bf16
