package cuda

import icuda "github.com/distopt/distopt/internal/cuda"

// Scalar is an element type that Bytes and View reinterpret.
type Scalar interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// Bytes returns the memory of s as bytes, without a copy, for Upload and
// Download of typed slices.
func Bytes[T Scalar](s []T) []byte { return icuda.Bytes(s) }

// View returns the memory of b as a []T, without a copy. It panics when b
// is misaligned for T or its length is not a multiple of T's size.
func View[T Scalar](b []byte) []T { return icuda.View[T](b) }
