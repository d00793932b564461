package fp8

import "math"

// minScale is the smallest scale ScaleFromAmax returns, 2^-126, the smallest
// normal float32, so that scale_inv stays finite.
const minScale = 0x1p-126

// ScaleFromAmax derives the cast scale from an amax by Transformer Engine's
// rule, in float32 arithmetic, step by step:
//
//	if amax is 0, ±Inf or NaN: scale = 1
//	else:
//	    scale = float32(f.Max() / |amax|)   (IEEE float32 division, RNE)
//	    scale = scale * float32(2^-margin)
//	    if scale is +Inf:  scale = math.MaxFloat32
//	    if scale < 2^-126: scale = 2^-126   (only with large margins)
//	    if pow2:           scale = 2^floor(log2 scale)
//	scaleInv = float32(1 / scale)
//
// A cast multiplies by scale; a reader multiplies decoded values by scaleInv.
// Every rank that reduced the same amax derives the same scale, so scale_inv
// is never sent.
func ScaleFromAmax(amax float32, f Format, margin int, pow2 bool) (scale, scaleInv float32) {
	ab := math.Float32bits(amax) & 0x7fffffff
	if ab == 0 || ab >= 0x7f800000 { // zero, Inf or NaN
		return 1, 1
	}
	s := f.Max() / math.Float32frombits(ab)
	s *= float32(math.Ldexp(1, -margin))
	if s > math.MaxFloat32 {
		s = math.MaxFloat32
	}
	if s < minScale {
		s = minScale
	}
	if pow2 {
		s = math.Float32frombits(math.Float32bits(s) & 0xff800000)
	}
	return s, 1 / s
}
