package optimizer_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// badAt is a schedule that yields a good rate until step at, then bad.
type badAt struct {
	at  int
	bad float64
}

func (s badAt) LR(t int) float64 {
	if t >= s.at {
		return s.bad
	}
	return 1e-3
}

func (s badAt) String() string { return "bad-at" }

// TestAbsurdHyperparameters: each absurd value of issue 21 is refused by
// New with ErrConfig and a message naming it (before, every master silently
// became NaN, or the value was taken).
func TestAbsurdHyperparameters(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name string
		cfg  optimizer.Config
		want string
	}{
		{"LR +Inf", optimizer.Config{LR: optimizer.Constant(inf)}, "learning rate (step 1) +Inf of schedule constant(+Inf) is not finite"},
		{"LR NaN", optimizer.Config{LR: optimizer.Constant(nan)}, "is not finite"},
		{"LR negative", optimizer.Config{LR: optimizer.Constant(-1)}, "learning rate (step 1) -1 of schedule constant(-1) is negative"},
		{"LR 1e30", optimizer.Config{LR: optimizer.Constant(1e30)}, "exceeds 10, the bound of adamw"},
		{"LR 1e30 SGD", optimizer.Config{Rule: optimizer.RuleSGD, LR: optimizer.Constant(1e30)}, "exceeds 10000, the bound of sgd"},
		{"warmup-cosine peak +Inf", optimizer.Config{LR: optimizer.WarmupCosine{Peak: inf, Warmup: 10, Total: 100}}, "learning rate (peak) +Inf"},
		{"warmup-cosine min NaN", optimizer.Config{LR: optimizer.WarmupCosine{Peak: 1e-3, Min: nan, Warmup: 10, Total: 100}}, "learning rate (min) NaN"},
		{"warmup-cosine negative steps", optimizer.Config{LR: optimizer.WarmupCosine{Peak: 1e-3, Warmup: -1, Total: 100}}, "negative step count"},
		{"weight decay NaN", optimizer.Config{WeightDecay: nan}, "weight decay is NaN"},
		{"decay flips sign", optimizer.Config{LR: optimizer.Constant(2), WeightDecay: 1}, "times the weight decay 1 exceeds 1"},
		{"beta1 NaN", optimizer.Config{Beta1: nan}, "Beta1 is NaN"},
		{"eps +Inf", optimizer.Config{Eps: inf}, "Eps is +Inf"},
		{"max grad norm NaN", optimizer.Config{MaxGradNorm: nan}, "MaxGradNorm is NaN"},
	}
	params := []optimizer.Param{{Name: "w", Shape: []int{8, 8}}}
	init := optimizertest.InitWeights(params, 1)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(init), tc.cfg)
			if err == nil {
				o.Close()
			}
			if !errors.Is(err, optimizer.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want ErrConfig saying %q", err, tc.want)
			}
		})
	}
}

// TestNaNInitialWeight: a non-finite initial weight is refused, naming the
// parameter and the element.
func TestNaNInitialWeight(t *testing.T) {
	params := []optimizer.Param{{Name: "a", Shape: []int{4}}, {Name: "w", Shape: []int{8, 8}}}
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		init := optimizertest.InitWeights(params, 1)
		init["w"][37] = v
		o, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(init), optimizer.Config{})
		if err == nil {
			o.Close()
		}
		if !errors.Is(err, optimizer.ErrConfig) || !strings.Contains(err.Error(), `initial value of "w": element 37 is`) {
			t.Fatalf("initial %v: New = %v", v, err)
		}
	}
}

// TestScheduleYieldsBadRate: a schedule that turns bad at step 3 fails that
// step with ErrConfig before anything moves (the weights stay those of step
// 2), and the optimizer is not broken by it.
func TestScheduleYieldsBadRate(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{8, 8}}}
	init := optimizertest.InitWeights(params, 1)
	for _, bad := range []float64{math.NaN(), math.Inf(1), -1e-3, 1e30} {
		o, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(init),
			optimizer.Config{LR: badAt{at: 3, bad: bad}})
		if err != nil {
			t.Fatal(err)
		}
		var masters []float32
		for step := 1; step <= 3; step++ {
			if err := o.SetGrad("w", optimizertest.RankGrad(params[0], step, 0)); err != nil {
				t.Fatal(err)
			}
			if step == 3 {
				masters, _ = o.Weights("w")
			}
			_, err = o.Step(context.Background())
			if step < 3 && err != nil {
				t.Fatal(err)
			}
		}
		if !errors.Is(err, optimizer.ErrConfig) || !strings.Contains(err.Error(), "learning rate (step 3)") {
			t.Fatalf("lr %v: step 3 = %v", bad, err)
		}
		after, err2 := o.Weights("w")
		if err2 != nil || !equal(masters, after) || o.StepCount() != 2 {
			t.Fatalf("lr %v: weights moved (%v) or step count %d", bad, err2, o.StepCount())
		}
		o.Close()
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestHugeShapes: shapes whose element count overflows, or whose buffers
// exceed any host's memory, are errors (before: a 0-element parameter that
// "trains", a request for -9.2e18 bytes, and "fatal error: out of memory").
func TestHugeShapes(t *testing.T) {
	for _, tc := range []struct {
		shape []int
		is    error
	}{
		{[]int{1 << 32, 1 << 32}, optimizer.ErrConfig},
		{[]int{3037000500, 3037000500}, optimizer.ErrConfig},
		{[]int{1 << 40}, cpu.ErrOutOfMemory},
	} {
		params := []optimizer.Param{{Name: "w", Shape: tc.shape}}
		init := func(string, int, []float32) error { return nil }
		o, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), params, init, optimizer.Config{})
		if err == nil {
			o.Close()
		}
		if !errors.Is(err, tc.is) {
			t.Errorf("shape %v: New = %v, want %v", tc.shape, err, tc.is)
		}
		t.Logf("shape %v: %v", tc.shape, err)
	}
}
