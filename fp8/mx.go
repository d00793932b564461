package fp8

import (
	"math"
	"math/bits"
)

// MXBlock is the number of elements that share one E8M0 scale in MXFP8.
const MXBlock = 32

// E8M0NaN is the E8M0 code of NaN: the scale of an MX block whose amax is
// Inf or NaN.
const E8M0NaN uint8 = 0xff

// E8M0Value returns the value of an E8M0 scale code: 2^(e-127) (2^-127, a
// float32 subnormal, for e = 0), and NaN (bits DecodedNaN) for E8M0NaN.
func E8M0Value(e uint8) float32 {
	switch e {
	case E8M0NaN:
		return math.Float32frombits(DecodedNaN)
	case 0:
		return math.Float32frombits(1 << 22) // 2^-127
	}
	return math.Float32frombits(uint32(e) << 23)
}

// CastMX casts src to MXFP8, per the OCP Microscaling Formats (MX)
// specification v1.0. Each run k of MXBlock elements, the last maybe shorter,
// shares the E8M0 scale scales[k]. With amax = Amax(run):
//
//   - amax finite, non-zero: X = floor(log2(amax)) - f.EmaxElem(), raised to
//     -127 if lower; it never exceeds 119. scales[k] = X + 127 and dst[i] =
//     f.Encode(float32(src[i] * 2^-X)), saturating to ±f.Max() (satfinite).
//   - amax 0: scales[k] = 127, scale 1, and the codes are 0x00, or 0x80 for -0.
//   - amax Inf or NaN: scales[k] = E8M0NaN and every code is f.NaN(). The run
//     decodes to NaN, as the specification says of a NaN scale.
//
// dst[i] * E8M0Value(scales[k]) then approximates src[i]. src must start at a
// block boundary. Large inputs are split across goroutines. CastMX panics if
// dst or scales is too short, or f is invalid.
func CastMX(dst []byte, scales []byte, src []float32, f Format) {
	checkBlocks("CastMX", len(dst), len(scales), len(src), MXBlock, f)
	emax := f.EmaxElem()
	parallel(len(src), 0, MXBlock, func(_, lo, hi int) {
		for b := lo; b < hi; b += MXBlock {
			e := min(b+MXBlock, hi)
			code, mul := mxScale(amaxBits(src[b:e]), emax)
			scales[b/MXBlock] = code
			if code == E8M0NaN {
				for i := b; i < e; i++ {
					dst[i] = f.NaN()
				}
				continue
			}
			castScaled(dst[b:e], src[b:e], mul, f)
		}
	})
}

// mxScale returns the E8M0 code of an MX block with amax bits a and the
// factor 2^-X its elements are multiplied by before encoding.
func mxScale(a uint32, emax int) (code uint8, mul float32) {
	switch {
	case a >= 0x7f800000:
		return E8M0NaN, 0
	case a == 0:
		return 127, 1
	}
	e := int(a>>23) - 127 // floor(log2(amax)) for a normal amax
	if a < 1<<23 {
		e = bits.Len32(a) - 150 // subnormal amax: 2^(len-1) * 2^-149
	}
	x := max(e-emax, -127)
	return uint8(x + 127), math.Float32frombits(uint32(127-x) << 23)
}
