package backend_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/backendtest"
)

// randomStats returns limbs of a random non-negative sum: each limb a
// random number of up to bits bits (limbs above the first top one zero),
// sometimes with runs of ones or zeros that make ties and near-ties.
func randomStats(r *rand.Rand) [backend.StatsLen]int64 {
	var s [backend.StatsLen]int64
	top := r.IntN(backend.NormLimbs)
	for i := 0; i <= top; i++ {
		switch r.IntN(4) {
		case 0:
			s[i] = 0
		case 1:
			s[i] = 0xffffffff
		case 2:
			s[i] = int64(r.Uint32() & 0x80000000)
		default:
			s[i] = int64(r.Uint32())
		}
		if i == backend.NormLimbs-1 {
			s[i] = int64(r.Uint64() >> (1 + r.IntN(40)))
		}
	}
	return s
}

// TestSumOfSquaresNearest checks the big-number-free conversion of the
// limbs against SumOfSquares (big.Float, exact then rounded once) on
// random sums, on every single bit, and on ties: 53 bits then a round bit
// with or without bits below.
func TestSumOfSquaresNearest(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 3))
	check := func(s [backend.StatsLen]int64) {
		t.Helper()
		want, got := backend.SumOfSquares(&s), backend.SumOfSquaresNearest(&s)
		if math.Float64bits(want) != math.Float64bits(got) {
			t.Fatalf("limbs %x: %v (%x), big.Float %v (%x)", s, got, math.Float64bits(got), want, math.Float64bits(want))
		}
	}
	for range 200000 {
		check(randomStats(r))
	}
	// every single bit, and ties at every position (backendtest.BitsAndTies)
	for _, s := range backendtest.BitsAndTies(r) {
		check(s)
	}
}

// TestSumOfSquaresNotNormalised checks that limbs larger than 32 bits (an
// all-reduce adds normalised limbs of several ranks) convert as their
// normalised form does.
func TestSumOfSquaresNotNormalised(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 4))
	for range 10000 {
		var s [backend.StatsLen]int64
		for range 1 + r.IntN(8) { // ranks
			x := randomStats(r)
			backend.Normalize(&x)
			x[backend.NormLimbs-1] >>= 4
			for i := range s {
				s[i] += x[i]
			}
		}
		if a, b := backend.SumOfSquares(&s), backend.SumOfSquaresNearest(&s); a != b {
			t.Fatalf("limbs %x: %v, big.Float %v", s, b, a)
		}
	}
}

// hostControl is the decision as the synchronous step made it on the host
// before the control block existed (step.go's checkGrads and the
// LossScaler's update), field by field: the independent twin of Advance.
func hostControl(c backend.Control, st [backend.StatsLen]int64) backend.Control {
	used := c.Scale
	norm := math.Sqrt(backend.SumOfSquares(&st)) / used
	finite := st[backend.NormLimbs] == 0
	scale, good := c.Scale, c.Good
	if c.Growth != 0 {
		if !finite {
			scale = math.Max(scale*c.Backoff, c.MinScale)
			good = 0
		} else {
			good++
			if good >= c.Interval {
				scale = math.Min(scale*c.Growth, c.MaxScale)
				good = 0
			}
		}
	}
	out := c
	out.Scale, out.Good, out.Used, out.NonFinite, out.Clip = scale, good, used, st[backend.NormLimbs], 1
	if !finite {
		out.Skip, out.Norm, out.GradScale = 1, math.Inf(1), float32(1/used)
		return out
	}
	out.Skip, out.Norm = 0, norm
	if c.MaxNorm > 0 {
		out.Clip = math.Min(1, c.MaxNorm/(norm+1e-6))
	}
	out.Step++
	out.GradScale = float32(out.Clip / used)
	return out
}

// TestControlAdvance runs random sequences of steps (finite and not,
// with and without clipping and a loss scaler) through Advance and through
// the host's former arithmetic, and demands equal blocks after each; it
// also checks that the block survives Encode and DecodeControl.
func TestControlAdvance(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 5))
	for run := range 300 {
		c := backend.Control{Scale: 1}
		if run%2 == 1 {
			c.Growth, c.Backoff, c.MinScale, c.MaxScale, c.Interval = 2, 0.5, 1, 1<<24, int64(1+r.IntN(3))
			c.Scale = math.Ldexp(1, r.IntN(24))
		}
		if run%3 != 0 {
			c.MaxNorm = math.Ldexp(r.Float64(), r.IntN(40)-10)
		}
		for step := range 20 {
			st := randomStats(r)
			backend.Normalize(&st)
			if r.IntN(4) == 0 {
				st[backend.NormLimbs] = int64(1 + r.IntN(5))
			}
			want := hostControl(c, st)
			c.Advance(&st)
			if !reflect.DeepEqual(c, want) {
				t.Fatalf("run %d step %d: %+v, host %+v", run, step, c, want)
			}
			back, err := backend.DecodeControl(c.Encode())
			if err != nil || !reflect.DeepEqual(back, c) {
				t.Fatalf("run %d step %d: decoded %+v (%v), encoded %+v", run, step, back, err, c)
			}
		}
	}
	if _, err := backend.DecodeControl(make([]byte, backend.ControlBytes-1)); err == nil {
		t.Error("DecodeControl of a short block: no error")
	}
}
