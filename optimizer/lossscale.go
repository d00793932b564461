package optimizer

import (
	"fmt"
	"math"
)

// Bounds of a LossScaler's scales (InitScale, MinScale, MaxScale). The
// update multiplies gradients by the float32 1/scale, which is finite and
// non-zero exactly when 2^-126 <= scale <= 2^127: 1/2^-126 = 2^126 is
// below the float32 maximum, 1/2^127 = 2^-127 is a float32 subnormal.
// A loss multiplied by the scale in float32 stays finite up to 2^127 too.
const (
	MinLossScale = 0x1p-126
	MaxLossScale = 0x1p127
)

// LossScaler is a dynamic loss scaler for FP16-style training: the caller
// multiplies its loss by Scale() before the backward pass; the optimizer
// divides the gradients by it. A step whose gradients are not finite is
// skipped and the scale backs off; after GrowthInterval good steps in a row
// the scale grows. Scales are powers of two, so that unscaling is exact,
// from MinLossScale to MaxLossScale.
//
// New copies the scaler: the optimizer keeps its own, so one value may
// serve several ranks' configurations. Read an optimizer's current scale
// with Optimizer.LossScale; the scaler passed in is left as it was.
type LossScaler struct {
	InitScale      float64 // default 2^16
	GrowthFactor   float64 // default 2
	BackoffFactor  float64 // default 0.5
	GrowthInterval int     // default 2000
	MinScale       float64 // default 1
	MaxScale       float64 // default 2^24

	scale float64
	good  int
}

func (s *LossScaler) init() error {
	if s.InitScale == 0 {
		s.InitScale = 1 << 16
	}
	if s.GrowthFactor == 0 {
		s.GrowthFactor = 2
	}
	if s.BackoffFactor == 0 {
		s.BackoffFactor = 0.5
	}
	if s.GrowthInterval == 0 {
		s.GrowthInterval = 2000
	}
	if s.MinScale == 0 {
		s.MinScale = 1
	}
	if s.MaxScale == 0 {
		s.MaxScale = 1 << 24
	}
	for _, v := range []struct {
		name   string
		x      float64
		bounds bool
	}{{"InitScale", s.InitScale, true}, {"GrowthFactor", s.GrowthFactor, false}, {"BackoffFactor", s.BackoffFactor, false},
		{"MinScale", s.MinScale, true}, {"MaxScale", s.MaxScale, true}} {
		if !isPow2(v.x) {
			return fmt.Errorf("optimizer: loss scaler %s %g is not a finite power of two: %w", v.name, v.x, ErrConfig)
		}
		if v.bounds && (v.x < MinLossScale || v.x > MaxLossScale) {
			return fmt.Errorf("optimizer: loss scaler %s %g is outside [MinLossScale, MaxLossScale] = [2^-126, 2^127]: %w", v.name, v.x, ErrConfig)
		}
	}
	if s.BackoffFactor >= 1 || s.GrowthFactor <= 1 || s.GrowthInterval < 1 || s.MinScale > s.MaxScale {
		return fmt.Errorf("optimizer: loss scaler needs backoff < 1 < growth, interval >= 1, min <= max: %w", ErrConfig)
	}
	s.scale = min(max(s.InitScale, s.MinScale), s.MaxScale)
	return nil
}

// isPow2 reports whether x is a finite positive power of two.
func isPow2(x float64) bool {
	frac, _ := math.Frexp(x)
	return x > 0 && !math.IsInf(x, 0) && frac == 0.5
}

// Scale is the current loss scale of this scaler. New copies the scaler
// it is given, so for an optimizer's scale call Optimizer.LossScale.
func (s *LossScaler) Scale() float64 { return s.scale }

// update records the outcome of a step.
func (s *LossScaler) update(finite bool) {
	if !finite {
		s.scale = max(s.scale*s.BackoffFactor, s.MinScale)
		s.good = 0
		return
	}
	s.good++
	if s.good >= s.GrowthInterval {
		s.scale = min(s.scale*s.GrowthFactor, s.MaxScale)
		s.good = 0
	}
}
