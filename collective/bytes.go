package collective

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/distopt/distopt/buffer"
)

// Element is a Go type whose values travel as one element of a DType:
// uint8 (Uint8), uint16 (the bits of a BFloat16), uint32 (Uint32), int64
// (Int64), float32 (Float32) and float64 (Float64).
type Element interface {
	uint8 | uint16 | uint32 | int64 | float32 | float64
}

// ToBytes returns the little-endian bytes of x, as a new HostBuffer.
func ToBytes[T Element](x []T) buffer.HostBuffer {
	var zero T
	size := int(unsafe.Sizeof(zero))
	b := make(buffer.HostBuffer, len(x)*size)
	encode(b, x)
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
	decode(x, b)
	return x
}

// ElementBits returns the bits of element i of b, a little-endian array of
// dt, widened to uint64 (a BFloat16 element gives its 16 bits).
func ElementBits(b []byte, dt buffer.DType, i int) uint64 {
	switch dt.Size() {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return binary.LittleEndian.Uint64(b[8*i:])
}

// SetElementBits sets element i of b, a little-endian array of dt, to the
// low dt.Size() bytes of v.
func SetElementBits(b []byte, dt buffer.DType, i int, v uint64) {
	switch dt.Size() {
	case 1:
		b[i] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}
