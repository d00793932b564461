package optimizer

import "fmt"

// LossScaler is a dynamic loss scaler for FP16-style training: the caller
// multiplies its loss by Scale() before the backward pass; the optimizer
// divides the gradients by it. A step whose gradients are not finite is
// skipped and the scale backs off; after GrowthInterval good steps in a row
// the scale grows. Scales are powers of two, so that unscaling is exact.
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
		name string
		x    float64
	}{{"InitScale", s.InitScale}, {"GrowthFactor", s.GrowthFactor}, {"BackoffFactor", s.BackoffFactor}, {"MinScale", s.MinScale}, {"MaxScale", s.MaxScale}} {
		if !isPow2(v.x) {
			return fmt.Errorf("optimizer: loss scaler %s %g is not a power of two: %w", v.name, v.x, ErrConfig)
		}
	}
	if s.BackoffFactor >= 1 || s.GrowthFactor <= 1 || s.GrowthInterval < 1 || s.MinScale > s.MaxScale {
		return fmt.Errorf("optimizer: loss scaler needs backoff < 1 < growth, interval >= 1, min <= max: %w", ErrConfig)
	}
	s.scale = min(max(s.InitScale, s.MinScale), s.MaxScale)
	return nil
}

func isPow2(x float64) bool {
	if x <= 0 {
		return false
	}
	for x >= 2 {
		x /= 2
	}
	for x < 1 {
		x *= 2
	}
	return x == 1
}

// Scale is the current loss scale.
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
