package fp8

import "math"

// CastScaled writes f.Encode(float32(src[i]*scale)) to dst[i] for every i
// (the product is rounded to float32 before the encode; no fused
// operation) and returns Amax(src), computed in the same pass. Large slices
// are split across goroutines; the result does not depend on the split. It
// panics if len(dst) < len(src) or f is invalid.
func CastScaled(dst []byte, src []float32, scale float32, f Format) (amax float32) {
	if len(dst) < len(src) {
		panic("fp8: CastScaled: dst shorter than src")
	}
	if !f.Valid() {
		panic(badFormat(f))
	}
	return math.Float32frombits(parallelMax(len(src), func(lo, hi int) uint32 {
		return castScaled(dst[lo:hi], src[lo:hi], scale, f)
	}))
}

// Dequantize writes float32(f.Decode(src[i]) * scaleInv) to dst[i] for every
// i (a float32 multiply, so NaN codes give NaN and E5M2 infinities give
// ±Inf or NaN as IEEE says). Large slices are split across goroutines. It
// panics if len(dst) < len(src) or f is invalid.
func Dequantize(dst []float32, src []byte, scaleInv float32, f Format) {
	if len(dst) < len(src) {
		panic("fp8: Dequantize: dst shorter than src")
	}
	t := table(f)
	parallel(len(src), 0, 1, func(_, lo, hi int) {
		d := dst[lo:hi]
		for i, b := range src[lo:hi] {
			d[i] = t[b] * scaleInv
		}
	})
}

// table returns the decode table of f; it panics for an invalid f.
func table(f Format) *[256]float32 {
	switch f {
	case E4M3:
		return &e4m3Table
	case E5M2:
		return &e5m2Table
	}
	panic(badFormat(f))
}

// castScaled is the serial kernel of CastScaled for a valid f; it returns
// the amax bits. It encodes with the code table of f, which gives the codes
// of Encode without its arithmetic.
func castScaled(dst []byte, src []float32, scale float32, f Format) uint32 {
	dst = dst[:len(src)]
	t := codeTables[f]()
	var m uint32
	for i, x := range src {
		m = max(m, math.Float32bits(x)&0x7fffffff)
		dst[i] = t.code(float32(x * scale))
	}
	return m
}
