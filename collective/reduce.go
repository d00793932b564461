package collective

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/distopt/distopt/buffer"
)

// Canonical NaN patterns written by Reduce whenever a floating point result
// is NaN, whatever the payloads of the inputs.
const (
	// CanonicalNaN32 is the float32 quiet NaN 0x7fc00000.
	CanonicalNaN32 uint32 = 0x7fc00000
	// CanonicalNaN64 is the float64 quiet NaN 0x7ff8000000000000.
	CanonicalNaN64 uint64 = 0x7ff8000000000000
)

// reduceBlock is the number of elements Reduce combines at a time when it
// needs an accumulator (three sources or more) or copies of the operands.
const reduceBlock = 1024

// littleEndian reports whether this machine stores integers and floats
// little-endian, as the byte slices of Reduce hold them; encoding/binary
// picks NativeEndian from the GOARCH of the build.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Reduce is the reference reduction of every backend. Element i of dst
// becomes op over element i of srcs[0], ..., srcs[n-1], srcs[r] being rank
// r's contribution. Elements are dt values, little-endian.
//
// Floats are converted exactly to float32, or float64 for Float64. Sum adds
// in rank order and Avg then divides by n. Every step, and the conversion to
// dt, rounds to nearest even; BFloat16 overflow gives ±Inf. Max makes NaN
// the largest value and +0 larger than -0. NaN results are the canonical
// quiet NaN (CanonicalNaN32, CanonicalNaN64, bf16.NaN), whatever the payloads.
// Integer Sum wraps, in two's complement for Int64. Max compares Uint8 and
// Uint32 unsigned, Int64 signed. Avg is not defined on integers.
//
// dst may be one of srcs, or share no byte with them. Reduce panics on empty
// srcs, lengths that differ from len(dst) or are not a multiple of
// dt.Size(), and an op not defined on dt.
func Reduce(dst []byte, srcs [][]byte, dt buffer.DType, op ReduceOp) {
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
		if dt != buffer.BFloat16 && dt != buffer.Float32 && dt != buffer.Float64 {
			panic(fmt.Sprintf("collective: Reduce avg on %s", dt))
		}
	default:
		panic(fmt.Sprintf("collective: Reduce with unknown reduction %d", op))
	}
	reduce(dst, srcs, dt, op, littleEndian)
}

// reduce is Reduce on validated arguments. When native (the machine is
// little-endian) and every slice starts aligned for the element type, the
// slices are read and written in place as Go slices of it. Otherwise the
// operands of each block are staged in aligned scratch memory: their bytes
// copied with native, else decoded and encoded with encoding/binary (the
// path of big-endian machines, which tests also take on little-endian ones).
func reduce(dst []byte, srcs [][]byte, dt buffer.DType, op ReduceOp, native bool) {
	switch dt {
	case buffer.Uint8:
		reduceWith(dst, srcs, &uint8Kernels[op], 0, native)
	case buffer.Uint32:
		reduceWith(dst, srcs, &uint32Kernels[op], 0, native)
	case buffer.Int64:
		reduceWith(dst, srcs, &int64Kernels[op], 0, native)
	case buffer.BFloat16:
		reduceWith(dst, srcs, &bf16Kernels[op], float32(len(srcs)), native)
	case buffer.Float32:
		reduceWith(dst, srcs, &float32Kernels[op], float32(len(srcs)), native)
	case buffer.Float64:
		reduceWith(dst, srcs, &float64Kernels[op], float64(len(srcs)), native)
	}
}

type intElem interface{ uint8 | uint32 | int64 }

type floatElem interface{ float32 | float64 }

// reduceScratch is the working memory of a blocked reduction: the
// accumulators of one block and three staged operands (dst and two
// sources), for elements of up to 8 bytes.
type reduceScratch [4][reduceBlock]uint64

var scratchPool = sync.Pool{New: func() any { return new(reduceScratch) }}

// reduceWith runs the loops of k over dst and srcs (see kernels), divisor
// div for Avg. When every slice can be viewed in place it takes two sources
// or fewer in one pass over the whole length, and more sources block by
// block, so that the accumulators stay in cache. Otherwise every operand of
// a block is first staged, and the result written to dst only after all
// operands of the block have been read, which keeps in place reductions
// right.
func reduceWith[E Element, A any](dst []byte, srcs [][]byte, k *kernels[E, A], div A, native bool) {
	direct := native && viewable[E](dst)
	for _, s := range srcs {
		direct = direct && viewable[E](s)
	}
	n := len(srcs)
	switch {
	case direct && n == 1:
		k.one(view[E](dst), view[E](srcs[0]))
		return
	case direct && n == 2:
		k.pair(view[E](dst), view[E](srcs[0]), view[E](srcs[1]), div)
		return
	}
	scratch := scratchPool.Get().(*reduceScratch)
	defer scratchPool.Put(scratch)
	acc := words[A](&scratch[0])
	var zero E
	size := int(unsafe.Sizeof(zero))
	for lo := 0; lo < len(dst); lo += reduceBlock * size {
		hi := min(lo+reduceBlock*size, len(dst))
		m := (hi - lo) / size
		// in returns the elements of source r in the block, staged in
		// scratch[slot] unless direct.
		in := func(r, slot int) []E {
			if direct {
				return view[E](srcs[r][lo:hi])
			}
			return load(words[E](&scratch[slot])[:m], srcs[r][lo:hi], native)
		}
		out := words[E](&scratch[1])[:m]
		if direct {
			out = view[E](dst[lo:hi])
		}
		switch n {
		case 1:
			k.one(out, in(0, 2))
		case 2:
			k.pair(out, in(0, 2), in(1, 3), div)
		default:
			a := acc[:m]
			r := 1 // sources before r are in a
			if n%2 == 0 {
				k.load(a, in(0, 2))
			} else {
				k.first(a, in(0, 2), in(1, 3))
				r = 2
			}
			for ; r < n-1; r += 2 {
				k.next(a, in(r, 2), in(r+1, 3))
			}
			k.last(out, a, in(n-1, 2), div)
		}
		if !direct {
			store(dst[lo:hi], out, native)
		}
	}
}

// words returns the memory of w as reduceBlock elements of T (at most 8
// bytes each).
func words[T any](w *[reduceBlock]uint64) []T {
	return unsafe.Slice((*T)(unsafe.Pointer(w)), reduceBlock)
}

// viewable reports whether b can be read as a []E in place: its start is
// aligned for E (the byte order is the caller's concern).
func viewable[E Element](b []byte) bool {
	var zero E
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%unsafe.Alignof(zero) == 0
}

// view returns b, aligned for E and in the machine's byte order, as a []E.
func view[E Element](b []byte) []E {
	var zero E
	return unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(zero)))
}

// load sets x to the little-endian elements in b and returns x: a copy of
// the bytes with native, else decoded.
func load[E Element](x []E, b []byte, native bool) []E {
	if native {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(b)), b)
	} else {
		decode(x, b)
	}
	return x
}

// store writes x to b as little-endian elements, every bit kept.
func store[E Element](b []byte, x []E, native bool) {
	if native {
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(b)))
	} else {
		encode(b, x)
	}
}

// decode reads len(dst) little-endian elements from b, every bit kept
// (a uint16 holds the bits of a BFloat16).
func decode[T Element](dst []T, b []byte) {
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
		for i := range d {
			d[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case []float64:
		for i := range d {
			d[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	}
}

// encode writes src to b as little-endian elements, every bit kept.
func encode[T Element](b []byte, src []T) {
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
		for i, v := range s {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	case []float64:
		for i, v := range s {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
		}
	}
}
