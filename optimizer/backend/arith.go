package backend

import (
	"math"
	"math/big"
)

// This file is the specification of the per-element arithmetic of a step.
// Every backend computes exactly these functions: each operation is a
// separately rounded float32 operation (round to nearest even), never fused;
// the explicit float32 conversions below keep the Go compiler from fusing.
// The CUDA kernels use __fmul_rn, __fadd_rn, __fdiv_rn and __fsqrt_rn in the
// same order.
//
// NaN payloads of float32 results are unspecified (the CPU keeps an input's
// payload, the GPU returns its canonical NaN); whether a result is NaN is
// specified. Steps never update with non-finite gradients, so masters only
// hold NaN when their initial values did. FP8, BF16 and E8M0 encodings of
// NaN are exact (fp8.E4M3NaN, fp8.E5M2NaN, bf16.NaN, fp8.E8M0NaN).

// AdamWElem updates one element with AdamW (decoupled weight decay):
//
//	g  = grad * gs
//	p  = p * shrink                 // shrink = 1 - lr*wd (1 without decay)
//	m  = b1*m + omb1*g
//	v  = b2*v + omb2*(g*g)
//	d  = sqrt(v)*rbc2 + eps         // rbc2 = 1/sqrt(1 - b2^t)
//	p  = p - stepSize*(m/d)         // stepSize = lr/(1 - b1^t)
func AdamWElem(p, m, v, grad float32, h *Hyper, stepSize, shrink float32) (float32, float32, float32) {
	g := float32(grad * h.GradScale)
	p = float32(p * shrink)
	m = float32(float32(h.Beta1*m) + float32(h.OneMinusBeta1*g))
	v = float32(float32(h.Beta2*v) + float32(h.OneMinusBeta2*float32(g*g)))
	d := float32(float32(sqrt32(v)*h.SqrtVCorrection) + h.Eps)
	p = float32(p - float32(stepSize*float32(m/d)))
	return p, m, v
}

// SGDElem updates one element with SGD, momentum and coupled weight decay:
//
//	g   = grad*gs + wd*p            // wd = 0 without decay
//	buf = mu*buf + g                // buf starts at 0
//	p   = p - lr*buf                // stepSize = lr
func SGDElem(p, buf, grad float32, h *Hyper, stepSize, wd float32) (float32, float32) {
	g := float32(float32(grad*h.GradScale) + float32(wd*p))
	buf = float32(float32(h.Momentum*buf) + g)
	p = float32(p - float32(stepSize*buf))
	return p, buf
}

// sqrt32 is the correctly rounded float32 square root (the float64 root of a
// float32 rounds to the correctly rounded float32 root).
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// AbsBits is the ordering key of amax: the bits of |x| as uint32 (NaN above
// +Inf above every number). The amax of a run is the largest key.
func AbsBits(x float32) uint32 { return math.Float32bits(x) & 0x7fffffff }

// NormLimbs is the number of 32-bit limbs of the exact sum of squares.
const NormLimbs = 9

// StatsLen is the number of int64 values of the gradient statistics: the
// limbs of the exact sum of squares, then the count of non-finite elements.
const StatsLen = NormLimbs + 1

// AddSquare adds x*x (rounded to float32) exactly to the fixed-point sum in
// stats, or counts x as non-finite when x or its float32 square is not
// finite. The square q = m * 2^(e-150) (m the 24-bit significand with the
// hidden bit, e the biased exponent, 1 for subnormals) is added as the
// integer m<<(pos%32) split over limbs pos/32 and pos/32+1, pos = e-1: limb i
// counts units of 2^(32i-149). Limbs are not normalised; callers add at most
// 2^24 squares before calling Normalize.
func AddSquare(stats *[StatsLen]int64, x float32) {
	q := float32(x * x)
	b := math.Float32bits(q)
	if b&0x7f800000 == 0x7f800000 { // x or its square is Inf or NaN
		stats[NormLimbs]++
		return
	}
	if b == 0 {
		return
	}
	e := int(b >> 23)
	m := uint64(b & 0x7fffff)
	if e > 0 {
		m |= 0x800000
	} else {
		e = 1
	}
	pos := e - 1
	w := m << (pos % 32)
	stats[pos/32] += int64(w & 0xffffffff)
	stats[pos/32+1] += int64(w >> 32)
}

// Normalize propagates carries so that limbs 0..NormLimbs-2 lie in
// [0, 2^32); the sum they represent is unchanged.
func Normalize(stats *[StatsLen]int64) {
	for i := 0; i < NormLimbs-1; i++ {
		c := stats[i] >> 32
		stats[i] &= 0xffffffff
		stats[i+1] += c
	}
}

// SumOfSquares converts the limbs to the float64 nearest their exact sum
// (ties to even), with big numbers: the reference of SumOfSquaresNearest.
func SumOfSquares(stats *[StatsLen]int64) float64 {
	s := *stats
	Normalize(&s)
	acc := new(big.Int)
	for i := NormLimbs - 1; i >= 0; i-- {
		acc.Lsh(acc, 32)
		acc.Add(acc, big.NewInt(s[i]))
	}
	f := new(big.Float).SetInt(acc) // precision 0: exact, rounded once by Float64
	f.SetMantExp(f, -149)
	v, _ := f.Float64()
	return v
}
