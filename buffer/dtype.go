package buffer

import "fmt"

// DType is the element type of a buffer taking part in a reduction.
type DType uint8

const (
	// Uint8 is one unsigned byte; gathers and broadcasts move every type as Uint8.
	Uint8 DType = iota + 1
	// BFloat16 is bfloat16 stored little-endian in two bytes.
	BFloat16
	// Float32 is IEEE binary32, little-endian.
	Float32
	// Float64 is IEEE binary64, little-endian.
	Float64
	// Uint32 is an unsigned 32-bit integer, little-endian (amax bit patterns).
	Uint32
	// Int64 is a signed 64-bit integer, little-endian (exact fixed-point sums).
	Int64
)

// Size returns the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case Uint8:
		return 1
	case BFloat16:
		return 2
	case Float32, Uint32:
		return 4
	case Float64, Int64:
		return 8
	}
	panic(fmt.Sprintf("buffer: unknown dtype %d", d))
}

func (d DType) String() string {
	switch d {
	case Uint8:
		return "uint8"
	case BFloat16:
		return "bfloat16"
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Uint32:
		return "uint32"
	case Int64:
		return "int64"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}
