package optimizer

import (
	"fmt"
	"math"
)

// Schedule gives the learning rate of step t (t = 1 for the first step).
type Schedule interface {
	LR(t int) float64
	String() string
}

// Constant is a fixed learning rate.
type Constant float64

// LR returns the constant.
func (c Constant) LR(int) float64 { return float64(c) }

func (c Constant) String() string { return fmt.Sprintf("constant(%g)", float64(c)) }

// WarmupCosine rises linearly from Peak/Warmup at step 1 to Peak at step
// Warmup, then follows a half cosine from Peak down to Min at step Total,
// and stays at Min after it.
type WarmupCosine struct {
	Peak, Min     float64
	Warmup, Total int
}

// LR implements Schedule.
func (s WarmupCosine) LR(t int) float64 {
	switch {
	case t <= 0:
		return 0
	case t < s.Warmup:
		return s.Peak * float64(t) / float64(s.Warmup)
	case t >= s.Total:
		return s.Min
	}
	span := s.Total - s.Warmup
	if span <= 0 {
		return s.Peak
	}
	progress := float64(t-s.Warmup) / float64(span)
	return s.Min + (s.Peak-s.Min)*0.5*(1+math.Cos(math.Pi*progress))
}

func (s WarmupCosine) String() string {
	return fmt.Sprintf("warmup-cosine(peak=%g min=%g warmup=%d total=%d)", s.Peak, s.Min, s.Warmup, s.Total)
}
