package bf16

import "math"

// NaN is the bfloat16 pattern every NaN converts to: the canonical quiet
// NaN that the GPU's cvt.rn.bf16.f32 instruction produces.
const NaN uint16 = 0x7fff

// FromFloat32 rounds x to bfloat16 with round-to-nearest-even. Values
// beyond the largest finite bfloat16 round to ±Inf as IEEE rounding says;
// infinities stay infinite; every NaN becomes NaN.
//
// Reference: let b be the bits of x; if x is NaN return 0x7fff; otherwise
// return (b + 0x7fff + (b>>16)&1) >> 16.
func FromFloat32(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return NaN
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// ToFloat32 widens a bfloat16 to float32 exactly (NaN payloads kept).
func ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// Round returns x rounded to the nearest bfloat16, as a float32.
func Round(x float32) float32 { return ToFloat32(FromFloat32(x)) }
