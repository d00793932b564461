package collective

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/distopt/distopt/fp8"
)

// Canonical NaN patterns written by Reduce whenever a floating point result
// is NaN, whatever the payloads of the inputs.
const (
	// CanonicalNaN32 is the float32 quiet NaN 0x7fc00000.
	CanonicalNaN32 uint32 = 0x7fc00000
	// CanonicalNaN64 is the float64 quiet NaN 0x7ff8000000000000.
	CanonicalNaN64 uint64 = 0x7ff8000000000000
)

// reduceBlock is the number of elements Reduce combines at a time.
const reduceBlock = 256

// Reduce is the reference reduction of every backend: element i of dst
// becomes the reduction op of element i of srcs[0], srcs[1], ...,
// srcs[len(srcs)-1] (srcs[r] is the contribution of rank r), every slice
// holding elements of dt in little-endian order.
//
// Floating point (BFloat16, Float32, Float64): each element is converted
// exactly to float32 (float64 for Float64).
//   - Sum computes s = x0; s += x1; ...; s += x(n-1) in that order, every
//     addition rounded to float32 (float64) with round-to-nearest-even.
//   - Avg computes that sum and then s / n, also rounded to nearest even.
//   - Max keeps the largest value, where NaN is larger than every number
//     (including +Inf) and +0 is larger than -0.
//
// The result is rounded to dt with round-to-nearest-even (BFloat16 through
// fp8.BF16FromFloat32: overflow gives ±Inf). A NaN result is always written
// as the canonical quiet NaN (CanonicalNaN32, CanonicalNaN64, fp8.BF16NaN),
// so results do not depend on NaN payloads or on the machine.
//
// Integers: Uint8 and Uint32 Sum wrap modulo 2^8 and 2^32, Int64 Sum wraps
// in two's complement; Max compares unsigned (Uint8, Uint32) or signed
// (Int64). Avg is not defined on integers.
//
// dst may be one of srcs (in place), or share no byte with any of them.
// Reduce panics if srcs is empty, if a length differs from len(dst), if the
// length is not a multiple of dt.Size(), or if op is not defined on dt.
func Reduce(dst []byte, srcs [][]byte, dt DType, op ReduceOp) {
	if len(srcs) == 0 {
		panic("collective: Reduce with no sources")
	}
	for r, s := range srcs {
		if len(s) != len(dst) {
			panic(fmt.Sprintf("collective: Reduce source %d has %d bytes, dst %d", r, len(s), len(dst)))
		}
	}
	if len(dst)%dt.Size() != 0 {
		panic(fmt.Sprintf("collective: Reduce of %d bytes, not a multiple of %s", len(dst), dt))
	}
	switch op {
	case Sum, Max:
	case Avg:
		if dt != BFloat16 && dt != Float32 && dt != Float64 {
			panic(fmt.Sprintf("collective: Reduce avg on %s", dt))
		}
	default:
		panic(fmt.Sprintf("collective: Reduce with unknown reduction %d", op))
	}
	switch dt {
	case Uint8:
		reduceInts[uint8](dst, srcs, dt, op)
	case Uint32:
		reduceInts[uint32](dst, srcs, dt, op)
	case Int64:
		reduceInts[int64](dst, srcs, dt, op)
	case BFloat16, Float32:
		reduceFloats[float32](dst, srcs, dt, op)
	case Float64:
		reduceFloats[float64](dst, srcs, dt, op)
	}
}

type intElem interface{ uint8 | uint32 | int64 }

type floatElem interface{ float32 | float64 }

func reduceInts[T intElem](dst []byte, srcs [][]byte, dt DType, op ReduceOp) {
	combine := func(acc, x []T) {
		for i := range acc {
			acc[i] += x[i]
		}
	}
	if op == Max {
		combine = func(acc, x []T) {
			for i := range acc {
				acc[i] = max(acc[i], x[i])
			}
		}
	}
	reduceBlocks(dst, srcs, dt, combine, nil)
}

func reduceFloats[T floatElem](dst []byte, srcs [][]byte, dt DType, op ReduceOp) {
	combine := func(acc, x []T) {
		for i := range acc {
			acc[i] += x[i]
		}
	}
	var finish func([]T)
	switch op {
	case Max:
		combine = func(acc, x []T) {
			for i, v := range x {
				a := acc[i]
				if v > a || v != v || (v == 0 && a == 0 && math.Signbit(float64(a))) {
					acc[i] = v
				}
			}
		}
	case Avg:
		n := T(len(srcs))
		finish = func(acc []T) {
			for i := range acc {
				acc[i] /= n
			}
		}
	}
	reduceBlocks(dst, srcs, dt, combine, finish)
}

// reduceBlocks reduces block by block: acc = srcs[0]; combine(acc, srcs[r])
// for r = 1, 2, ...; finish(acc) if finish is not nil; dst = acc.
func reduceBlocks[T intElem | floatElem](dst []byte, srcs [][]byte, dt DType, combine func(acc, x []T), finish func([]T)) {
	size := dt.Size()
	var accBuf, tmpBuf [reduceBlock]T
	for lo := 0; lo < len(dst); lo += reduceBlock * size {
		hi := min(lo+reduceBlock*size, len(dst))
		k := (hi - lo) / size
		acc, tmp := accBuf[:k], tmpBuf[:k]
		decode(acc, srcs[0][lo:hi], dt)
		for _, s := range srcs[1:] {
			decode(tmp, s[lo:hi], dt)
			combine(acc, tmp)
		}
		if finish != nil {
			finish(acc)
		}
		encode(dst[lo:hi], acc, dt, true)
	}
}

// decode reads len(dst) elements of dt from b.
func decode[T Element](dst []T, b []byte, dt DType) {
	switch d := any(dst).(type) {
	case []uint8:
		copy(d, b)
	case []uint16:
		for i := range d {
			d[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
	case []uint32:
		for i := range d {
			d[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
	case []int64:
		for i := range d {
			d[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case []float32:
		if dt == BFloat16 {
			for i := range d {
				d[i] = fp8.Float32FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
			}
			return
		}
		for i := range d {
			d[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case []float64:
		for i := range d {
			d[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	}
}

// encode writes src to b as elements of dt, rounding float32 to bfloat16
// for BFloat16. With canon, a float32 or float64 NaN is written as the
// canonical NaN; without, its bits are kept.
func encode[T Element](b []byte, src []T, dt DType, canon bool) {
	switch s := any(src).(type) {
	case []uint8:
		copy(b, s)
	case []uint16:
		for i, v := range s {
			binary.LittleEndian.PutUint16(b[2*i:], v)
		}
	case []uint32:
		for i, v := range s {
			binary.LittleEndian.PutUint32(b[4*i:], v)
		}
	case []int64:
		for i, v := range s {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
		}
	case []float32:
		if dt == BFloat16 {
			for i, v := range s {
				binary.LittleEndian.PutUint16(b[2*i:], fp8.BF16FromFloat32(v))
			}
			return
		}
		for i, v := range s {
			bits := math.Float32bits(v)
			if canon && v != v {
				bits = CanonicalNaN32
			}
			binary.LittleEndian.PutUint32(b[4*i:], bits)
		}
	case []float64:
		for i, v := range s {
			bits := math.Float64bits(v)
			if canon && v != v {
				bits = CanonicalNaN64
			}
			binary.LittleEndian.PutUint64(b[8*i:], bits)
		}
	}
}
