package fp8

import (
	"math"
	"sync"
)

// codeTable holds the code of every class of float32 bit patterns that
// Encode cannot tell apart, for one format: index i stands for the patterns
// b with b>>16 == i>>1 and (b&0xffff != 0) == (i&1 == 1). Every pattern of
// a class encodes to the same code, because every decision of Encode is
// taken at bit 16 or above, or on whether the bits below are all zero:
//
//   - a rounding position (the highest discarded bit) is bit 19 or above:
//     bit 19 for E4M3 normals, bit 20 for E5M2 normals, higher for their
//     subnormals, and the leading bit itself for values that round to zero
//     or to the smallest subnormal; the bits below it act only through
//     whether they are all zero;
//   - the bounds of the ranges (exponent boundaries, 2^-10 and 2^-17 where
//     rounding to zero ends, Max, Inf) have their low 16 bits zero, and
//     Encode compares with them as "above" or "at least", which the class
//     of a bound separates from the bound itself by the low-bits flag;
//   - float32 subnormals all encode to ±0.
//
// TestExhaustive checks the table against Encode on every pattern.
type codeTable [1 << 17]uint8

// code returns the code of x: f.Encode(x) for the table of f.
func (t *codeTable) code(x float32) uint8 {
	b := math.Float32bits(x)
	// Bit 0 of b>>15 is bit 15 of b; or-ing in whether bits 0-14 are
	// nonzero makes it whether bits 0-15 are.
	return t[b>>15|(b&0x7fff+0x7fff)>>15]
}

// build fills t from enc, with the pattern of each class whose low 16 bits
// are 0 or 1.
func (t *codeTable) build(enc func(float32) uint8) *codeTable {
	for i := range t {
		t[i] = enc(math.Float32frombits(uint32(i>>1)<<16 | uint32(i&1)))
	}
	return t
}

// e4m3Codes and e5m2Codes hold the tables, built on first use (128 KiB
// each, about 0.2 ms on one core).
var e4m3Codes, e5m2Codes codeTable

// codeTables returns the table of a valid f.
var codeTables = [...]func() *codeTable{
	E4M3: sync.OnceValue(func() *codeTable { return e4m3Codes.build(encodeE4M3) }),
	E5M2: sync.OnceValue(func() *codeTable { return e5m2Codes.build(encodeE5M2) }),
}
