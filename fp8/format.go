package fp8

import (
	"fmt"
	"math"
)

// Format is an 8-bit floating-point format of the OCP FP8 specification.
type Format uint8

const (
	// E4M3 is OCP "e4m3fn": 1 sign, 4 exponent (bias 7) and 3 mantissa bits,
	// subnormals, largest finite value 448, no infinities, and NaN only as
	// S.1111.111 (0x7f and 0xff).
	E4M3 Format = iota + 1
	// E5M2 is OCP e5m2: 1 sign, 5 exponent (bias 15) and 2 mantissa bits,
	// subnormals, largest finite value 57344, IEEE-style infinities
	// (S.11111.00) and NaNs (S.11111.01, .10, .11).
	E5M2
)

// NaN codes written by Encode for every NaN input (the sign is dropped). They
// mirror what the GPU's cvt.rn.satfinite.{e4m3,e5m2}x2.f32 instruction
// produces; if the hardware is found to differ, change them here only.
const (
	E4M3NaN uint8 = 0x7f
	E5M2NaN uint8 = 0x7f
)

// DecodedNaN is the bit pattern of the float32 NaN that Decode returns for
// every NaN code, whatever its sign or payload.
const DecodedNaN uint32 = 0x7fc00000

// Largest finite codes (positive); the negative ones have bit 7 set.
const (
	e4m3MaxCode uint8 = 0x7e // S.1111.110 = 448
	e5m2MaxCode uint8 = 0x7b // S.11110.11 = 57344

	e4m3MaxBits uint32 = 0x43e00000 // float32 bits of 448
	e5m2MaxBits uint32 = 0x47600000 // float32 bits of 57344
)

// formatSpec holds the constants of a format.
type formatSpec struct {
	name string
	max  float32
	emax int
	nan  uint8
}

var specs = [...]formatSpec{
	E4M3: {"E4M3", 448, 8, E4M3NaN},
	E5M2: {"E5M2", 57344, 15, E5M2NaN},
}

// spec returns the constants of f; it panics for an invalid Format.
func (f Format) spec() *formatSpec {
	if !f.Valid() {
		panic(badFormat(f))
	}
	return &specs[f]
}

// String returns "E4M3" or "E5M2" (or "Format(n)" for an invalid value).
func (f Format) String() string {
	if !f.Valid() {
		return fmt.Sprintf("Format(%d)", uint8(f))
	}
	return specs[f].name
}

// Valid reports whether f is E4M3 or E5M2.
func (f Format) Valid() bool { return f == E4M3 || f == E5M2 }

// Max returns the largest finite value of the format: 448 for E4M3 and
// 57344 for E5M2. It panics for an invalid Format.
func (f Format) Max() float32 { return f.spec().max }

// EmaxElem returns the exponent of the largest normal power of two of the
// format, the emax of the element type in the OCP MX specification: 8 for
// E4M3 and 15 for E5M2. It panics for an invalid Format.
func (f Format) EmaxElem() int { return f.spec().emax }

// NaN returns the code that Encode writes for a NaN input (E4M3NaN or
// E5M2NaN). It panics for an invalid Format.
func (f Format) NaN() uint8 { return f.spec().nan }

// Encode rounds x to the format with round-to-nearest-even, producing
// subnormals where needed, with the satfinite rule: a finite |x| above Max()
// and ±Inf become ±Max(); every NaN becomes the format's NaN code (E4M3NaN or
// E5M2NaN, sign dropped). -0 encodes to 0x80, and so does every negative x
// that rounds to zero. It panics for an invalid Format.
func (f Format) Encode(x float32) uint8 {
	switch f {
	case E4M3:
		return encodeE4M3(x)
	case E5M2:
		return encodeE5M2(x)
	}
	panic(badFormat(f))
}

// Decode returns the exact value of the code b as a float32. NaN codes (E4M3
// 0x7f and 0xff; E5M2 0x7d-0x7f and 0xfd-0xff) decode to the float32 NaN whose
// bits are DecodedNaN; E5M2 0x7c and 0xfc decode to ±Inf. It panics for an
// invalid Format.
func (f Format) Decode(b uint8) float32 {
	switch f {
	case E4M3:
		return e4m3Table[b]
	case E5M2:
		return e5m2Table[b]
	}
	panic(badFormat(f))
}

func badFormat(f Format) string { return fmt.Sprintf("fp8: invalid format %d", uint8(f)) }

var e4m3Table, e5m2Table [256]float32

func init() {
	for i := range 256 {
		e4m3Table[i] = decodeBits(uint8(i), 3, 7, true)
		e5m2Table[i] = decodeBits(uint8(i), 2, 15, false)
	}
}

// decodeBits builds the float32 value of code c for a format with m mantissa
// bits and exponent bias bias; fn selects the e4m3fn special values.
func decodeBits(c uint8, m, bias uint32, fn bool) float32 {
	sign := uint32(c&0x80) << 24
	ebits := 7 - m
	e := uint32(c&0x7f) >> m
	mant := uint32(c) & (1<<m - 1)
	emax := uint32(1)<<ebits - 1
	switch {
	case fn && e == emax && mant == 1<<m-1, !fn && e == emax && mant != 0:
		return math.Float32frombits(DecodedNaN)
	case !fn && e == emax:
		return math.Float32frombits(sign | 0x7f800000)
	case e == 0: // subnormal: mant * 2^(1-bias-m), exact in float32
		v := float32(mant) * math.Float32frombits((127+1-bias-m)<<23)
		return math.Float32frombits(sign | math.Float32bits(v))
	}
	return math.Float32frombits(sign | (e+127-bias)<<23 | mant<<(23-m))
}
