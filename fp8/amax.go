package fp8

import "math"

// Amax returns the largest |x| of src, ordering NaN above +Inf above every
// finite value: the result is the float32 whose bits are the maximum over i
// of Float32bits(src[i]) & 0x7fffffff. It is therefore exact, independent of
// the order of evaluation, and a packed set of amaxes can be all-reduced as
// uint32 MAX. A NaN result is the NaN of largest payload in src. Amax of an
// empty slice is 0. Large slices are split across goroutines.
func Amax(src []float32) float32 {
	return math.Float32frombits(parallelMax(len(src), func(lo, hi int) uint32 {
		return amaxBits(src[lo:hi])
	}))
}

// MaxAmax returns the larger of two amaxes in the order of Amax: the float32
// whose bits are max(Float32bits(a)&0x7fffffff, Float32bits(b)&0x7fffffff).
func MaxAmax(a, b float32) float32 {
	return math.Float32frombits(max(math.Float32bits(a)&0x7fffffff, math.Float32bits(b)&0x7fffffff))
}

// amaxBits is the serial kernel of Amax; it returns the bits of the amax.
func amaxBits(src []float32) uint32 {
	// Four independent accumulators let the loop run without a dependency
	// chain through one register.
	var m0, m1, m2, m3 uint32
	i := 0
	for ; i+4 <= len(src); i += 4 {
		s := src[i : i+4 : i+4]
		m0 = max(m0, math.Float32bits(s[0])&0x7fffffff)
		m1 = max(m1, math.Float32bits(s[1])&0x7fffffff)
		m2 = max(m2, math.Float32bits(s[2])&0x7fffffff)
		m3 = max(m3, math.Float32bits(s[3])&0x7fffffff)
	}
	for ; i < len(src); i++ {
		m0 = max(m0, math.Float32bits(src[i])&0x7fffffff)
	}
	return max(m0, m1, m2, m3)
}
