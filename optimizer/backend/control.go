package backend

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// Control is the step control block: the decision of a step (norm, clip
// coefficient, skip) and the state that carries from step to step (loss
// scale, good-step count, step count), derived from the all-reduced
// gradient statistics by Advance. A backend keeps it in its own memory
// (ControlBytes bytes, the layout of Encode: update.cu's struct StepCtl on
// the GPU, host memory on the CPU) so that the update and cast read the
// gradient scale and the skip flag from it, and the host reads it only
// when it asks.
type Control struct {
	// Configuration, fixed for a run.
	MaxNorm float64 // clip the global norm to it (0: no clipping)
	// Loss scaler (Growth 0: none, Scale stays as it is).
	Growth, Backoff, MinScale, MaxScale float64
	Interval                            int64

	// State, updated by every Advance.
	Scale float64 // loss scale of the next step's gradients
	Good  int64   // finite steps since the scale last changed
	Step  int64   // steps taken (skipped ones not counted)

	// Outcome of the last Advance.
	Used      float64 // the loss scale of its gradients
	Norm      float64 // global gradient norm after unscaling (+Inf when skipped)
	Clip      float64 // clip coefficient (1: no clipping, and when skipped)
	NonFinite int64   // gradient elements that were not finite
	GradScale float32 // float32(Clip / Used): the update's gradient factor
	Skip      uint32  // 1 when the step is skipped: nothing may be written
}

// ControlBytes is the size of an encoded Control.
const ControlBytes = 112

// Byte offsets of the fields the kernels read.
const (
	ControlGradScaleOff = 104
	ControlSkipOff      = 108
)

// Encode returns c in its memory layout: every field little-endian in
// declaration order, 8-byte fields first then GradScale and Skip (4 bytes
// each).
func (c *Control) Encode() []byte {
	b := make([]byte, ControlBytes)
	le := binary.LittleEndian
	for i, f := range []float64{c.MaxNorm, c.Growth, c.Backoff, c.MinScale, c.MaxScale} {
		le.PutUint64(b[8*i:], math.Float64bits(f))
	}
	le.PutUint64(b[40:], uint64(c.Interval))
	le.PutUint64(b[48:], math.Float64bits(c.Scale))
	le.PutUint64(b[56:], uint64(c.Good))
	le.PutUint64(b[64:], uint64(c.Step))
	for i, f := range []float64{c.Used, c.Norm, c.Clip} {
		le.PutUint64(b[72+8*i:], math.Float64bits(f))
	}
	le.PutUint64(b[96:], uint64(c.NonFinite))
	le.PutUint32(b[ControlGradScaleOff:], math.Float32bits(c.GradScale))
	le.PutUint32(b[ControlSkipOff:], c.Skip)
	return b
}

// DecodeControl is the inverse of Encode; b must hold ControlBytes bytes.
func DecodeControl(b []byte) (Control, error) {
	if len(b) < ControlBytes {
		return Control{}, fmt.Errorf("backend: control block of %d bytes, want %d", len(b), ControlBytes)
	}
	le := binary.LittleEndian
	f := func(off int) float64 { return math.Float64frombits(le.Uint64(b[off:])) }
	i := func(off int) int64 { return int64(le.Uint64(b[off:])) }
	return Control{
		MaxNorm: f(0), Growth: f(8), Backoff: f(16), MinScale: f(24), MaxScale: f(32), Interval: i(40),
		Scale: f(48), Good: i(56), Step: i(64),
		Used: f(72), Norm: f(80), Clip: f(88), NonFinite: i(96),
		GradScale: math.Float32frombits(le.Uint32(b[ControlGradScaleOff:])), Skip: le.Uint32(b[ControlSkipOff:]),
	}, nil
}

// Advance decides a step from its all-reduced gradient statistics (limbs
// as GradStats leaves them, summed over ranks): the reference of every
// backend's control kernel. With s the exact sum of squares rounded to the
// nearest float64 (SumOfSquaresNearest):
//
//	Used = Scale; Norm = sqrt(s)/Used; NonFinite = stats[NormLimbs]
//	loss scaler (Growth != 0): a non-finite step sets Scale =
//	  max(Scale*Backoff, MinScale), Good = 0; a finite one counts Good and,
//	  at Interval, sets Scale = min(Scale*Growth, MaxScale), Good = 0
//	non-finite: Skip = 1, Norm = +Inf, Clip = 1, GradScale = float32(1/Used)
//	finite: Skip = 0, Clip = min(1, MaxNorm/(Norm+1e-6)) when MaxNorm > 0
//	  (else 1), Step++, GradScale = float32(Clip/Used)
//
// every operation a correctly rounded float64 one.
func (c *Control) Advance(stats *[StatsLen]int64) {
	c.Used = c.Scale
	c.Norm = math.Sqrt(SumOfSquaresNearest(stats)) / c.Used
	c.NonFinite = stats[NormLimbs]
	finite := c.NonFinite == 0
	if c.Growth != 0 {
		if !finite {
			c.Scale = max(c.Scale*c.Backoff, c.MinScale)
			c.Good = 0
		} else if c.Good++; c.Good >= c.Interval {
			c.Scale = min(c.Scale*c.Growth, c.MaxScale)
			c.Good = 0
		}
	}
	c.Clip = 1
	if !finite {
		c.Skip, c.Norm = 1, math.Inf(1)
		c.GradScale = float32(1 / c.Used)
		return
	}
	c.Skip = 0
	if c.MaxNorm > 0 {
		if q := c.MaxNorm / (c.Norm + 1e-6); q < 1 {
			c.Clip = q
		}
	}
	c.Step++
	c.GradScale = float32(c.Clip / c.Used)
}

// statsWords is the number of 32-bit words of the normalised sum: eight
// limbs, and the last limb's 64 bits.
const statsWords = NormLimbs + 1

// SumOfSquaresNearest is SumOfSquares without big numbers, as the control
// kernel computes it: the exact sum (limbs normalised, limb i in units of
// 2^(32i-149)) rounded once to the nearest float64, ties to even. The sum
// must be non-negative (limbs as AddSquare leaves them).
func SumOfSquaresNearest(stats *[StatsLen]int64) float64 {
	s := *stats
	Normalize(&s)
	var w [statsWords]uint32
	for i := range NormLimbs - 1 {
		w[i] = uint32(s[i])
	}
	w[NormLimbs-1] = uint32(s[NormLimbs-1])
	w[NormLimbs] = uint32(uint64(s[NormLimbs-1]) >> 32)
	bit := func(k int) uint64 { return uint64(w[k/32]>>(k%32)) & 1 }
	top := -1 // index of the highest set bit
	for k := statsWords - 1; k >= 0 && top < 0; k-- {
		if w[k] != 0 {
			top = 32*k + bits.Len32(w[k]) - 1
		}
	}
	if top < 0 {
		return 0
	}
	if top < 53 { // exact
		var m uint64
		for k := top; k >= 0; k-- {
			m = m<<1 | bit(k)
		}
		return math.Ldexp(float64(m), -149)
	}
	lo := top - 53 // bits [lo, top] are the 53 kept and the round bit
	var m uint64
	for k := top; k >= lo; k-- {
		m = m<<1 | bit(k)
	}
	sticky := false
	for k := 0; k < lo; k++ {
		sticky = sticky || bit(k) != 0
	}
	round := m & 1
	m >>= 1
	if round != 0 && (sticky || m&1 != 0) {
		m++ // 2^53 at most: still exact in a float64
	}
	return math.Ldexp(float64(m), lo+1-149)
}
