package fp8

import "math"

// The encoders work on a, the bits of |x|, in three ranges whose results are
// all computed and then chosen between with comparisons that the compiler
// turns into conditional moves (no data-dependent branch, so the speed
// does not depend on how values are spread over the ranges):
//
//   - Normal results (a at least the bits of the smallest normal): round the
//     23-bit float32 mantissa to the format's m bits, ties to even, by
//     adding 2^(22-m) - 1 plus the lowest kept bit and shifting right by
//     23-m, after rebiasing the exponent field from 127 to the format's
//     bias. A rounding carry out of the mantissa increments the exponent,
//     which is the right result, up to the largest finite code.
//   - Subnormal results: the float32 sum |x| + 2^k, with 2^k the power of two
//     whose float32 ulp (2^(k-23)) is the format's smallest subnormal, is |x|
//     rounded by the FPU to a multiple of that subnormal, to nearest even
//     (the rounding mode of Go's float32 arithmetic); its bits minus those
//     of 2^k are the code, and a value that rounds up to the smallest normal
//     gives the smallest normal's code. Flush-to-zero settings cannot change
//     it: the sum is normal, and an input subnormal in float32 is far below
//     half the smallest subnormal of either format, so it encodes to zero
//     whether or not it is read as zero.
//   - Above the largest finite value (including Inf): a is clamped to the
//     bits of Max before the normal rounding. Those have their low 23-m bits
//     zero, so the rounding increment (below 2^(23-m), whatever lowest kept
//     bit it reads from the unclamped a) cannot carry: the largest code.
//   - NaN: the NaN code, without the sign.
//
// Each encoder stays within the compiler's inlining budget (cost 77 of 80,
// see go build -gcflags=-m=2), so that it inlines into the callers' loops;
// computing the subnormal result inside its if would compile to a branch.

// encodeE4M3 is Encode for E4M3.
func encodeE4M3(x float32) uint8 {
	const (
		minNormal = (127 - 6) << 23 // bits of 2^-6
		magic     = 0x1p14          // float32 ulp 2^-9, the smallest subnormal
		magicBits = (127 + 14) << 23
	)
	b := math.Float32bits(x)
	a := b & 0x7fffffff
	sub := math.Float32bits(math.Float32frombits(a)+magic) - magicBits
	c := (min(a, e4m3MaxBits) + (a>>20)&1 - ((127-7)<<23 - (1<<19 - 1))) >> 20
	if a < minNormal {
		c = sub
	}
	c |= b >> 24 & 0x80
	if a > 0x7f800000 {
		c = uint32(E4M3NaN)
	}
	return uint8(c)
}

// encodeE5M2 is Encode for E5M2.
func encodeE5M2(x float32) uint8 {
	const (
		minNormal = (127 - 14) << 23 // bits of 2^-14
		magic     = 0x1p7            // float32 ulp 2^-16, the smallest subnormal
		magicBits = (127 + 7) << 23
	)
	b := math.Float32bits(x)
	a := b & 0x7fffffff
	sub := math.Float32bits(math.Float32frombits(a)+magic) - magicBits
	c := (min(a, e5m2MaxBits) + (a>>21)&1 - ((127-15)<<23 - (1<<20 - 1))) >> 21
	if a < minNormal {
		c = sub
	}
	c |= b >> 24 & 0x80
	if a > 0x7f800000 {
		c = uint32(E5M2NaN)
	}
	return uint8(c)
}
