package fp8

import "github.com/distopt/distopt/bf16"

// BF16NaN is bf16.NaN.
//
// Deprecated: use package bf16.
const BF16NaN = bf16.NaN

// BF16FromFloat32 is bf16.FromFloat32.
//
// Deprecated: use package bf16.
func BF16FromFloat32(x float32) uint16 { return bf16.FromFloat32(x) }

// Float32FromBF16 is bf16.ToFloat32.
//
// Deprecated: use package bf16.
func Float32FromBF16(h uint16) float32 { return bf16.ToFloat32(h) }

// RoundBF16 is bf16.Round.
//
// Deprecated: use package bf16.
func RoundBF16(x float32) float32 { return bf16.Round(x) }
