package fp8

import "math"

// This file keeps the first, branchy integer formulation of the encoders
// (before the select-based one of encode.go) as a second implementation:
// the tests compare the two and the benchmarks run them side by side.

// branchyE4M3 is Encode for E4M3 with one branch per range.
func branchyE4M3(x float32) uint8 {
	b := math.Float32bits(x)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return E4M3NaN
	case a > e4m3MaxBits: // above 448, including +Inf
		return sign | e4m3MaxCode
	case a >= (127-6)<<23: // at least 2^-6: normal (a carry may reach the next binade)
		return sign | uint8(branchyShiftRNE(a, 23-3)-(127-7)<<3)
	}
	return sign | branchySubnormal(a, 14)
}

// branchyE5M2 is Encode for E5M2 with one branch per range.
func branchyE5M2(x float32) uint8 {
	b := math.Float32bits(x)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return E5M2NaN
	case a > e5m2MaxBits: // above 57344, including +Inf
		return sign | e5m2MaxCode
	case a >= (127-14)<<23: // at least 2^-14: normal
		return sign | uint8(branchyShiftRNE(a, 23-2)-(127-15)<<2)
	}
	return sign | branchySubnormal(a, 7)
}

// branchyShiftRNE returns v / 2^s rounded to nearest, ties to even (1 <= s
// <= 31, v + 2^(s-1) must not overflow).
func branchyShiftRNE(v uint32, s uint) uint32 {
	return (v + (1 << (s - 1)) - 1 + (v>>s)&1) >> s
}

// branchySubnormal returns a, the bits of a non-negative float32 below the
// format's smallest normal, in units of the format's smallest subnormal,
// rounded to nearest even; k = 23 + 1 - bias - mantissa bits, so the shift
// is k - e for an unbiased float32 exponent e.
func branchySubnormal(a uint32, k int) uint8 {
	e := int(a>>23) - 127
	if e < -126 { // zero or float32 subnormal: far below half the smallest subnormal
		return 0
	}
	s := k - e
	if s > 25 { // below half the smallest subnormal
		return 0
	}
	return uint8(branchyShiftRNE(a&0x7fffff|0x800000, uint(s)))
}

// branchyEncoder returns the branchy encoder of a valid f.
func branchyEncoder(f Format) func(float32) uint8 {
	if f == E4M3 {
		return branchyE4M3
	}
	return branchyE5M2
}

// branchyCastScaled is castScaled with the branchy encoders.
func branchyCastScaled(dst []byte, src []float32, scale float32, f Format) uint32 {
	dst = dst[:len(src)]
	var m uint32
	if f == E4M3 {
		for i, x := range src {
			m = max(m, math.Float32bits(x)&0x7fffffff)
			dst[i] = branchyE4M3(float32(x * scale))
		}
		return m
	}
	for i, x := range src {
		m = max(m, math.Float32bits(x)&0x7fffffff)
		dst[i] = branchyE5M2(float32(x * scale))
	}
	return m
}
