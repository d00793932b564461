package optimizer_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/cpu"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// boundsParams is a small model for the bounds tests.
var boundsParams = []optimizer.Param{{Name: "w", Shape: []int{16, 16}}, {Name: "b", Shape: []int{16}, HighPrecision: true}}

// newWithin calls New on one rank and fails the test if it has not
// returned after a minute (New of this model takes milliseconds; before,
// an infinite loss scale made it loop forever).
func newWithin(t *testing.T, cfg optimizer.Config) (*optimizer.Optimizer, error) {
	t.Helper()
	type result struct {
		o   *optimizer.Optimizer
		err error
	}
	done := make(chan result, 1)
	go func() {
		o, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), boundsParams,
			optimizer.FromMap(optimizertest.InitWeights(boundsParams, 1)), cfg)
		done <- result{o, err}
	}()
	select {
	case r := <-done:
		return r.o, r.err
	case <-time.After(time.Minute):
		t.Fatal("New did not return")
		return nil, nil
	}
}

// TestNumericBoundsRefused: each configuration past a documented bound is
// refused by New with ErrConfig and a message naming the field and the
// bound. Before, Eps 1e-50 and Momentum 1e39 trained to NaN, and an
// infinite loss scale made New loop forever.
func TestNumericBoundsRefused(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	sgd := func(mom, lr, wd float64) optimizer.Config {
		return optimizer.Config{Rule: optimizer.RuleSGD, Momentum: mom, LR: optimizer.Constant(lr), WeightDecay: wd}
	}
	ls := func(f func(s *optimizer.LossScaler)) optimizer.Config {
		s := &optimizer.LossScaler{}
		f(s)
		return optimizer.Config{LossScaler: s}
	}
	cases := []struct {
		name string
		cfg  optimizer.Config
		says string
	}{
		{"Eps 1e-50, 0 in float32", optimizer.Config{Eps: 1e-50}, "Eps is 1e-50, below MinEps"},
		{"Eps subnormal in float32", optimizer.Config{Eps: 1e-40}, "below MinEps"},
		{"Eps just below MinEps", optimizer.Config{Eps: math.Nextafter(optimizer.MinEps, 0)}, "below MinEps"},
		{"Beta1 squared above Beta2", optimizer.Config{Beta1: 0.999, Beta2: 0.5}, "Beta1 0.999 squared is not below Beta2 0.5"},
		{"Beta1 squared equal to Beta2", optimizer.Config{Beta1: 0.5, Beta2: 0.25}, "squared is not below Beta2"},
		{"SGD Momentum 1e39", sgd(1e39, 1e-3, 0), "Momentum is 1e+39, want below 1"},
		{"SGD Momentum 1", sgd(1, 1e-3, 0), "Momentum is 1, want below 1"},
		{"SGD Momentum 1 in float32", sgd(1-1e-9, 1e-3, 0), "want below 1 (as a float32)"},
		{"SGD decay past 2(1+Momentum)", sgd(0.5, 1, 3.5), "exceeds 2*(1+Momentum) = 3"},
		{"loss scaler MaxScale +Inf", ls(func(s *optimizer.LossScaler) { s.MaxScale = inf }), "MaxScale +Inf is not a finite power of two"},
		{"loss scaler InitScale +Inf", ls(func(s *optimizer.LossScaler) { s.InitScale = inf }), "InitScale +Inf is not a finite power of two"},
		{"loss scaler GrowthFactor +Inf", ls(func(s *optimizer.LossScaler) { s.GrowthFactor = inf }), "GrowthFactor +Inf"},
		{"loss scaler MinScale NaN", ls(func(s *optimizer.LossScaler) { s.MinScale = nan }), "MinScale NaN"},
		{"loss scaler MaxScale 2^128", ls(func(s *optimizer.LossScaler) { s.MaxScale = 0x1p128 }), "outside [MinLossScale, MaxLossScale]"},
		{"loss scaler MinScale 2^-127", ls(func(s *optimizer.LossScaler) { s.MinScale = 0x1p-127 }), "outside [MinLossScale, MaxLossScale]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := newWithin(t, c.cfg)
			if err == nil {
				o.Close()
			}
			if !errors.Is(err, optimizer.ErrConfig) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("New = %v, want ErrConfig saying %q", err, c.says)
			}
		})
	}
}

// TestNumericBoundsTrainFinitely takes the configurations at the bounds,
// which New accepts, through steps whose gradients are 0 for most
// elements (the 0/0 of a vanishing Eps), 1 for one element at the first
// step only (a moment that must decay), and at the largest rate: every
// master and moment stays finite.
func TestNumericBoundsTrainFinitely(t *testing.T) {
	sgd := func(mom, lr, wd float64) optimizer.Config {
		return optimizer.Config{Rule: optimizer.RuleSGD, Momentum: mom, LR: optimizer.Constant(lr), WeightDecay: wd}
	}
	cases := []struct {
		name string
		cfg  optimizer.Config
	}{
		{"Eps MinEps, largest rate", optimizer.Config{Eps: optimizer.MinEps, LR: optimizer.Constant(optimizer.MaxLRAdamW)}},
		{"Beta1 squared just below Beta2", optimizer.Config{Eps: optimizer.MinEps, Beta1: 0.9, Beta2: 0.8101, LR: optimizer.Constant(optimizer.MaxLRAdamW)}},
		{"SGD Momentum 0.999", sgd(0.999, 1, 0)},
		{"SGD decay at 2(1+Momentum)", sgd(0.5, 1, 3)},
		{"loss scaler at its bounds", optimizer.Config{LossScaler: &optimizer.LossScaler{InitScale: optimizer.MaxLossScale, MinScale: optimizer.MinLossScale, MaxScale: optimizer.MaxLossScale}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := newWithin(t, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			for s := range 40 {
				for _, p := range boundsParams {
					g := make([]float32, optimizertest.Numel(p.Shape))
					if s == 0 {
						g[0] = 1
					}
					if err := o.SetGrad(p.Name, g); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := o.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			pieces, err := o.ReadPieces()
			if err != nil {
				t.Fatal(err)
			}
			for _, pc := range pieces {
				for what, x := range map[string][]float32{"master": pc.Master, "m": pc.M, "v": pc.V} {
					for i, v := range x {
						if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
							t.Fatalf("%s of %s element %d is %g after 40 steps", what, pc.Param, pc.Offset+i, v)
						}
					}
				}
			}
		})
	}
}

// TestNumericBoundsNeeded runs one element of the update rules, as
// backend.AdamWElem and SGDElem define them, past each bound: the weight
// becomes NaN or infinite, so the bound refuses configurations that do
// fail; at the bound it stays finite for as many steps.
func TestNumericBoundsNeeded(t *testing.T) {
	// adamw returns the step at which the weight stopped being finite (0:
	// never) when the gradient is g1 at step 1 and 0 after.
	adamw := func(p backend.Params, lr float64, g1 float32, steps int) int {
		x, m, v := float32(0.5), float32(0), float32(0)
		for t := 1; t <= steps; t++ {
			h := backend.RuleAdamW.Hyper(p, t, 1)
			s := backend.RuleAdamW.Factors(p, t, lr, 0)
			g := float32(0)
			if t == 1 {
				g = g1
			}
			x, m, v = backend.AdamWElem(x, m, v, g, &h, s.StepSize, s.Shrink)
			if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
				return t
			}
		}
		return 0
	}
	sgd := func(p backend.Params, lr, wd float64, steps int) int {
		x, buf := float32(0.5), float32(0)
		h := backend.RuleSGD.Hyper(p, 1, 1)
		for t := 1; t <= steps; t++ {
			x, buf = backend.SGDElem(x, buf, 1, &h, float32(lr), float32(wd))
			if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
				return t
			}
		}
		return 0
	}
	const steps = 20000
	adam := func(b1, b2, eps float64) backend.Params { return backend.Params{Beta1: b1, Beta2: b2, Eps: eps} }
	mom := func(mu float64) backend.Params { return backend.Params{Momentum: mu} }
	maxLR := optimizer.MaxLRAdamW
	cases := []struct {
		name     string
		past, at func() int
	}{
		{"Eps, gradient always 0",
			func() int { return adamw(adam(0.9, 0.999, 1e-50), 1e-3, 0, steps) },
			func() int { return adamw(adam(0.9, 0.999, optimizer.MinEps), maxLR, 0, steps) }},
		{"Eps, a tiny gradient once",
			func() int { return adamw(adam(0.9, 0.999, 1e-50), 1e-3, 0x1p-80, steps) },
			func() int { return adamw(adam(0.9, 0.999, optimizer.MinEps), maxLR, 0x1p-80, steps) }},
		{"Beta1 squared and Beta2",
			func() int { return adamw(adam(0.999, 0.5, optimizer.MinEps), maxLR, 1, steps) },
			func() int { return adamw(adam(0.9, 0.8101, optimizer.MinEps), maxLR, 1, steps) }},
		{"SGD Momentum 1e39",
			func() int { return sgd(mom(1e39), 1e-3, 0, steps) },
			func() int { return sgd(mom(0.999), 1, 0, steps) }},
		{"SGD Momentum above 1",
			func() int { return sgd(mom(2), 1e-3, 0, steps) },
			func() int { return sgd(mom(0.999), 1e-3, 0, steps) }},
		{"SGD decay",
			func() int { return sgd(mom(0.5), 1, 3.5, steps) },
			func() int { return sgd(mom(0.5), 1, 3, steps) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if n := c.past(); n == 0 {
				t.Errorf("past the bound: finite for %d steps", steps)
			}
			if n := c.at(); n != 0 {
				t.Errorf("at the bound: not finite at step %d", n)
			}
		})
	}
}

// TestSharedLossScaler gives one *LossScaler to the configurations of
// in-process ranks: each optimizer keeps its own copy (no data race under
// -race), the value passed is left as it was, and every rank's scale
// follows the same sequence as a rank given a scaler of its own.
// Before, ranks wrote the shared value: 7 data races, and New filled in
// its defaults.
func TestSharedLossScaler(t *testing.T) {
	const world, steps = 2, 7
	shared := &optimizer.LossScaler{InitScale: 1 << 10, GrowthInterval: 2}
	orig := *shared
	run := func(world int, ls func() *optimizer.LossScaler) [][]float64 {
		comms := inproc.Communicators(world)
		scales := make([][]float64, world)
		errs := make([]error, world)
		done := make(chan struct{})
		for r := range world {
			go func() {
				defer func() { done <- struct{}{} }()
				cfg := optimizer.Config{LossScaler: ls()}
				o, err := optimizer.New(context.Background(), comms[r], cpu.New(1), boundsParams,
					optimizer.FromMap(optimizertest.InitWeights(boundsParams, 1)), cfg)
				if err != nil {
					errs[r] = err
					return
				}
				defer o.Close()
				for s := range steps {
					for _, p := range boundsParams {
						g := optimizertest.Grad(p, 3, s)
						if s == 2 {
							g[0] = float32(math.Inf(1)) // a skipped step: the scale backs off
						}
						if err := o.SetGrad(p.Name, g); err != nil {
							errs[r] = err
							return
						}
					}
					if _, err := o.Step(context.Background()); err != nil {
						errs[r] = err
						return
					}
					scales[r] = append(scales[r], o.LossScale())
				}
			}()
		}
		for range world {
			<-done
		}
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		return scales
	}
	want := run(1, func() *optimizer.LossScaler { s := orig; return &s })[0]
	got := run(world, func() *optimizer.LossScaler { return shared })
	for r := range world {
		if fmt.Sprint(got[r]) != fmt.Sprint(want) {
			t.Errorf("rank %d: scales %v, want %v", r, got[r], want)
		}
	}
	if *shared != orig {
		t.Errorf("New changed the shared scaler: %+v, was %+v", *shared, orig)
	}
}
