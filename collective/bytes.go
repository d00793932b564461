package collective

import (
	"fmt"
	"unsafe"
)

// Element is a Go type whose values travel as one element of a DType:
// uint8 (Uint8), uint16 (the bits of a BFloat16), uint32 (Uint32), int64
// (Int64), float32 (Float32) and float64 (Float64).
type Element interface {
	uint8 | uint16 | uint32 | int64 | float32 | float64
}

// ToBytes returns the little-endian bytes of x, as a new HostBuffer.
func ToBytes[T Element](x []T) HostBuffer {
	var zero T
	size := int(unsafe.Sizeof(zero))
	b := make(HostBuffer, len(x)*size)
	encode(b, x, elementDType(zero), false)
	return b
}

// FromBytes decodes little-endian bytes into a new slice of T. It panics if
// len(b) is not a multiple of the size of T.
func FromBytes[T Element](b []byte) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(b)%size != 0 {
		panic(fmt.Sprintf("collective: FromBytes of %d bytes, not a multiple of %d", len(b), size))
	}
	x := make([]T, len(b)/size)
	decode(x, b, elementDType(zero))
	return x
}

// elementDType is the DType whose bytes hold exactly the values of T
// (uint16 is moved as raw bits).
func elementDType(x any) DType {
	switch x.(type) {
	case uint8:
		return Uint8
	case uint16:
		return BFloat16
	case uint32:
		return Uint32
	case int64:
		return Int64
	case float32:
		return Float32
	}
	return Float64
}
