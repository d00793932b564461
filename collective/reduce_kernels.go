package collective

import (
	"math"

	"github.com/distopt/distopt/bf16"
)

// The element loops of Reduce. Each one makes a single pass, reading every
// operand of element i before writing element i of its first argument, so
// that argument may be one of the others (in place). Every operand has at
// least len(first argument) elements.
//
// A reduction of x0, ..., x(n-1) over n ranks runs, per block of elements:
//
//	n = 1:        one(dst, x0)
//	n = 2:        pair(dst, x0, x1, div)
//	n >= 4, even: load(acc, x0); next(acc, x1, x2); ...; next(acc, x(n-3), x(n-2)); last(dst, acc, x(n-1), div)
//	n >= 3, odd:  first(acc, x0, x1); next(acc, x2, x3); ...; last(dst, acc, x(n-1), div)
//
// where acc holds the accumulators (float32 for BFloat16), op is applied
// left to right (rank order), each step rounded to the accumulator type
// (Go fuses no floating point operation here: it fuses only x*y + z),
// "/ div" divides by n for Avg and is absent otherwise, and out rounds to
// the element type (bf16.FromFloat32 for BFloat16) and writes a NaN as
// the canonical NaN. next takes two sources at a time because that halves
// the passes over the accumulators.
type kernels[E Element, A any] struct {
	one   func(dst, x []E)                     // dst = out(x), the same as out(x / 1) for Avg
	pair  func(dst, x, y []E, div A)           // dst = out((x op y) / div)
	load  func(acc []A, x []E)                 // acc = x
	first func(acc []A, x, y []E)              // acc = x op y
	next  func(acc []A, x, y []E)              // acc = (acc op x) op y
	last  func(dst []E, acc []A, x []E, div A) // dst = out((acc op x) / div)
}

// The kernels of each dtype, indexed by ReduceOp (Avg of an integer type is
// never used).
var (
	uint8Kernels   = kernelsByOp(sameKernels[uint8])
	uint32Kernels  = kernelsByOp(sameKernels[uint32])
	int64Kernels   = kernelsByOp(sameKernels[int64])
	bf16Kernels    = kernelsByOp(bf16KernelsOf)
	float32Kernels = kernelsByOp(floatKernels[float32])
	float64Kernels = kernelsByOp(floatKernels[float64])
)

func kernelsByOp[E Element, A any](of func(ReduceOp) kernels[E, A]) *[Max + 1]kernels[E, A] {
	var t [Max + 1]kernels[E, A]
	for _, op := range []ReduceOp{Sum, Avg, Max} {
		t[op] = of(op)
	}
	return &t
}

// sameKernels are the loops for elements accumulated as they are stored.
func sameKernels[T intElem | floatElem](op ReduceOp) kernels[T, T] {
	k := kernels[T, T]{one: copyElems[T], load: copyElems[T], first: addOf[T], next: addTo[T]}
	if op == Max {
		k.first, k.next = maxOf[T], maxTo[T]
	}
	out := k.first // integers need no rounding and have no NaN
	k.pair = func(dst, x, y []T, _ T) { out(dst, x, y) }
	k.last = k.pair
	return k
}

// floatKernels are sameKernels with Avg and the canonical NaN of floats.
func floatKernels[F floatElem](op ReduceOp) kernels[F, F] {
	k := sameKernels[F](op)
	k.one = canonicalF[F]
	switch op {
	case Sum:
		k.pair = sumOutF[F]
	case Avg:
		k.pair = avgOutF[F]
	case Max:
		k.pair = maxOutF[F]
	}
	k.last = k.pair
	return k
}

// bf16KernelsOf are the loops for BFloat16 elements (their bits, as
// uint16) accumulated in float32.
func bf16KernelsOf(op ReduceOp) kernels[uint16, float32] {
	k := kernels[uint16, float32]{one: canonicalBF16, load: widenBF16,
		first: addBF16Of, next: addBF16To, pair: sumPairBF16, last: sumLastBF16}
	switch op {
	case Avg:
		k.pair, k.last = avgPairBF16, avgLastBF16
	case Max:
		k.first, k.next, k.pair, k.last = maxBF16Of, maxBF16To, maxPairBF16, maxLastBF16
	}
	return k
}

func copyElems[T Element](dst, x []T) { copy(dst, x) }

func addTo[T intElem | floatElem](acc, x, y []T) {
	x, y = x[:len(acc)], y[:len(acc)]
	for i := range acc {
		acc[i] = acc[i] + x[i] + y[i]
	}
}

// maxTo uses the built-in max, which for floats is the order of Reduce:
// max(x, NaN) is NaN and max(-0, +0) is +0.
func maxTo[T intElem | floatElem](acc, x, y []T) {
	x, y = x[:len(acc)], y[:len(acc)]
	for i := range acc {
		acc[i] = max(acc[i], x[i], y[i])
	}
}

func addOf[T intElem | floatElem](dst, x, y []T) {
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		dst[i] = x[i] + y[i]
	}
}

func maxOf[T intElem | floatElem](dst, x, y []T) {
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		dst[i] = max(x[i], y[i])
	}
}

// canonicalNaN returns the canonical NaN of F (CanonicalNaN32 or
// CanonicalNaN64).
func canonicalNaN[F floatElem]() F {
	var z F
	if _, ok := any(z).(float32); ok {
		return F(math.Float32frombits(CanonicalNaN32))
	}
	return F(math.Float64frombits(CanonicalNaN64))
}

func canonicalF[F floatElem](dst, x []F) {
	nan := canonicalNaN[F]()
	x = x[:len(dst)]
	for i, v := range x {
		if v != v {
			v = nan
		}
		dst[i] = v
	}
}

func sumOutF[F floatElem](dst, x, y []F, _ F) {
	nan := canonicalNaN[F]()
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		s := x[i] + y[i]
		if s != s {
			s = nan
		}
		dst[i] = s
	}
}

func avgOutF[F floatElem](dst, x, y []F, div F) {
	nan := canonicalNaN[F]()
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		s := (x[i] + y[i]) / div
		if s != s {
			s = nan
		}
		dst[i] = s
	}
}

func maxOutF[F floatElem](dst, x, y []F, _ F) {
	nan := canonicalNaN[F]()
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		s := max(x[i], y[i])
		if s != s {
			s = nan
		}
		dst[i] = s
	}
}

// BFloat16 loops: bf16.ToFloat32 and bf16.FromFloat32 (NaN to
// bf16.NaN, round to nearest even, overflow to ±Inf) are inlined.

func canonicalBF16(dst, x []uint16) {
	x = x[:len(dst)]
	for i, h := range x {
		dst[i] = bf16.FromFloat32(bf16.ToFloat32(h))
	}
}

func widenBF16(acc []float32, x []uint16) {
	x = x[:len(acc)]
	for i, h := range x {
		acc[i] = bf16.ToFloat32(h)
	}
}

func addBF16Of(acc []float32, x, y []uint16) {
	x, y = x[:len(acc)], y[:len(acc)]
	for i := range acc {
		acc[i] = bf16.ToFloat32(x[i]) + bf16.ToFloat32(y[i])
	}
}

func maxBF16Of(acc []float32, x, y []uint16) {
	x, y = x[:len(acc)], y[:len(acc)]
	for i := range acc {
		acc[i] = max(bf16.ToFloat32(x[i]), bf16.ToFloat32(y[i]))
	}
}

func addBF16To(acc []float32, x, y []uint16) {
	x, y = x[:len(acc)], y[:len(acc)]
	for i := range acc {
		acc[i] = acc[i] + bf16.ToFloat32(x[i]) + bf16.ToFloat32(y[i])
	}
}

func maxBF16To(acc []float32, x, y []uint16) {
	x, y = x[:len(acc)], y[:len(acc)]
	for i := range acc {
		acc[i] = max(acc[i], bf16.ToFloat32(x[i]), bf16.ToFloat32(y[i]))
	}
}

func sumPairBF16(dst, x, y []uint16, _ float32) {
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		dst[i] = bf16.FromFloat32(bf16.ToFloat32(x[i]) + bf16.ToFloat32(y[i]))
	}
}

func avgPairBF16(dst, x, y []uint16, div float32) {
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		dst[i] = bf16.FromFloat32((bf16.ToFloat32(x[i]) + bf16.ToFloat32(y[i])) / div)
	}
}

func maxPairBF16(dst, x, y []uint16, _ float32) {
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		dst[i] = bf16.FromFloat32(max(bf16.ToFloat32(x[i]), bf16.ToFloat32(y[i])))
	}
}

func sumLastBF16(dst []uint16, acc []float32, x []uint16, _ float32) {
	acc, x = acc[:len(dst)], x[:len(dst)]
	for i := range dst {
		dst[i] = bf16.FromFloat32(acc[i] + bf16.ToFloat32(x[i]))
	}
}

func avgLastBF16(dst []uint16, acc []float32, x []uint16, div float32) {
	acc, x = acc[:len(dst)], x[:len(dst)]
	for i := range dst {
		dst[i] = bf16.FromFloat32((acc[i] + bf16.ToFloat32(x[i])) / div)
	}
}

func maxLastBF16(dst []uint16, acc []float32, x []uint16, _ float32) {
	acc, x = acc[:len(dst)], x[:len(dst)]
	for i := range dst {
		dst[i] = bf16.FromFloat32(max(acc[i], bf16.ToFloat32(x[i])))
	}
}
