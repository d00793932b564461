package optimizer

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
)

// TestAdamWClosedForm compares a few AdamW steps in float32 with the same
// algorithm computed in float64. Each step does about a dozen float32
// operations per element, each with relative error at most 2^-24; the update
// term is bounded by lr*|m/d| <= lr/(1-beta1)*..., so after 5 steps the
// masters may differ by a few ulps of the update: we allow 1e-6 absolute
// (the masters are O(0.05), the updates O(1e-2)), a thousand times less than
// the effect of a wrong bias correction or a missing decay (>= 1e-5).
func TestAdamWClosedForm(t *testing.T) {
	params := []Param{{Name: "w", Shape: []int{5, 7}}, {Name: "n", Shape: []int{7}, HighPrecision: true, NoDecay: true}}
	cfg := Config{LR: Constant(1e-2), WeightDecay: 0.1, GradType: collective.Float32}
	const steps = 5
	res := run(t, 1, steps, params, cfg, rankGrad)
	init := initWeights(params, 1)
	for _, ps := range res[0].pieces {
		var p0 Param
		for _, p := range params {
			if p.Name == ps.Param {
				p0 = p
			}
		}
		wd := 0.1
		if p0.NoDecay {
			wd = 0
		}
		for i := range ps.Master {
			p, m, v := float64(init[ps.Param][ps.Offset+i]), 0.0, 0.0
			for s := 1; s <= steps; s++ {
				g := float64(rankGrad(p0, s-1, 0)[ps.Offset+i])
				p *= 1 - 1e-2*wd
				m = 0.9*m + 0.1*g
				v = 0.999*v + 0.001*g*g
				mh := m / (1 - math.Pow(0.9, float64(s)))
				vh := v / (1 - math.Pow(0.999, float64(s)))
				p -= 1e-2 * mh / (math.Sqrt(vh) + 1e-8)
			}
			if d := math.Abs(float64(ps.Master[i]) - p); d > 1e-6 {
				t.Fatalf("%s[%d]: float32 %g, float64 %g (diff %g)", ps.Param, i, ps.Master[i], p, d)
			}
		}
	}
}

// TestSGDClosedForm checks SGD with momentum and coupled weight decay.
func TestSGDClosedForm(t *testing.T) {
	params := []Param{{Name: "w", Shape: []int{33}}}
	cfg := Config{Rule: RuleSGD, Momentum: 0.9, LR: Constant(0.05), WeightDecay: 0.01, GradType: collective.Float32}
	const steps = 4
	res := run(t, 1, steps, params, cfg, rankGrad)
	init := initWeights(params, 1)["w"]
	for i, got := range res[0].pieces[0].Master {
		p, buf := float64(init[i]), 0.0
		for s := range steps {
			g := float64(rankGrad(params[0], s, 0)[i]) + 0.01*p
			buf = 0.9*buf + g
			p -= 0.05 * buf
		}
		if d := math.Abs(float64(got) - p); d > 1e-6 {
			t.Fatalf("w[%d]: float32 %g, float64 %g", i, got, p)
		}
	}
}

// TestNonFiniteSkip puts a NaN or an Inf in one rank's gradient: every rank
// skips the step, reports it, and keeps its state.
func TestNonFiniteSkip(t *testing.T) {
	params := awkwardParams()
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1)), 1e30} {
		cfg := Config{Groups: testGroups()}
		grad := func(p Param, s, r int) []float32 {
			g := rankGrad(p, s, r)
			if s == 1 && r == 2 && p.Name == "prime" {
				g[100] = bad
			}
			return g
		}
		res := run(t, 4, 3, params, cfg, grad)
		scaled := cfg
		scaled.LossScaler = &LossScaler{InitScale: 1 << 10}
		withScaler := run(t, 4, 3, params, scaled, grad)
		clean := run(t, 4, 2, params, cfg, func(p Param, s, r int) []float32 {
			if s == 1 {
				s = 2
			}
			return rankGrad(p, s, r)
		})
		for r := range res {
			sr := res[r].results[1]
			if !sr.Skipped || !strings.Contains(sr.Reason, "not finite") || sr.Step != 1 {
				t.Fatalf("bad=%g rank %d: step 1 = %+v, want skipped", bad, r, sr)
			}
			if res[r].results[2].Step != 2 {
				t.Fatalf("rank %d: after the skip %+v, want step 2", r, res[r].results[2])
			}
			if ws := withScaler[r].results; !ws[1].Skipped || ws[1].LossScale != 1024 || ws[2].LossScale != 512 {
				t.Fatalf("rank %d: loss scale %g then %g, want 1024 then 512 after the skip", r, ws[1].LossScale, ws[2].LossScale)
			}
			// Skipping step 1 and taking step 2 equals taking steps 0 and 2.
			for i, ps := range res[r].pieces {
				if sameBits(ps.Master, clean[r].pieces[i].Master) >= 0 {
					t.Fatalf("bad=%g rank %d: %s differs from the run without the bad step", bad, r, ps.Param)
				}
			}
		}
	}
}

func TestLossScalerGrowth(t *testing.T) {
	s := &LossScaler{InitScale: 8, GrowthInterval: 3, MaxScale: 32}
	if err := s.init(); err != nil {
		t.Fatal(err)
	}
	want := []float64{8, 8, 16, 16, 16, 32, 32, 32, 32, 16}
	finite := []bool{true, true, true, true, true, true, true, true, true, false}
	for i, f := range finite {
		s.update(f)
		if s.Scale() != want[i] {
			t.Fatalf("after update %d: scale %g, want %g", i, s.Scale(), want[i])
		}
	}
	if err := (&LossScaler{InitScale: 1000}).init(); !errors.Is(err, ErrConfig) {
		t.Fatalf("non-power-of-two scale accepted: %v", err)
	}
}

func TestWarmupCosine(t *testing.T) {
	s := WarmupCosine{Peak: 1, Min: 0.1, Warmup: 4, Total: 14}
	cases := []struct {
		t    int
		want float64
	}{{1, 0.25}, {2, 0.5}, {4, 1}, {9, 0.55}, {14, 0.1}, {100, 0.1}}
	for _, c := range cases {
		if got := s.LR(c.t); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("LR(%d) = %g, want %g", c.t, got, c.want)
		}
	}
}

// TestMismatchNamed gives one rank a different parameter shape: every rank
// fails to start with ErrMismatch naming the difference.
func TestMismatchNamed(t *testing.T) {
	comms := inproc.Communicators(3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			params := awkwardParams()
			cfg := Config{Groups: testGroups()}
			if r == 2 {
				params[3].Shape = []int{8192}
				cfg.Recipe = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}
			}
			_, errs[r] = New(ctx, comms[r], NewCPU(1), params, FromMap(initWeights(params, 1)), cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "rank 2") || !strings.Contains(err.Error(), "parameter shapes") || !strings.Contains(err.Error(), "recipe") {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestAbsentRank: a rank that never steps makes the others fail at their
// deadline, and the optimizer refuses further use.
func TestAbsentRank(t *testing.T) {
	params := awkwardParams()
	comms := inproc.Communicators(3)
	opts := make([]*Optimizer, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			opts[r], err = New(context.Background(), comms[r], NewCPU(1), params, FromMap(initWeights(params, 1)), Config{Groups: testGroups()})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, errs[r] = opts[r].Step(ctx)
			if time.Since(start) > 5*time.Second {
				t.Errorf("rank %d returned after %v", r, time.Since(start))
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d stepped without rank 2", r)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, collective.ErrAborted) {
			t.Fatalf("rank %d: %v, want a deadline or abort error", r, err)
		}
		if _, err := opts[r].Step(context.Background()); !errors.Is(err, ErrBroken) {
			t.Fatalf("rank %d: step after failure: %v, want ErrBroken", r, err)
		}
	}
}

// TestMemoryReport checks the report against the buffers actually allocated
// and the design's formula 1 + 2 + 12/d bytes per parameter.
func TestMemoryReport(t *testing.T) {
	params := []Param{{Name: "a", Shape: []int{1024, 1024}}, {Name: "b", Shape: []int{512, 2048}}}
	for _, d := range []int{1, 2, 4, 8} {
		comms := inproc.Communicators(d)
		opts := make([]*Optimizer, d)
		var wg sync.WaitGroup
		for r := range d {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				opts[r], err = New(context.Background(), comms[r], NewCPU(1), params, func(string, int, []float32) error { return nil }, Config{})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		o := opts[0]
		var actual int64
		for _, bk := range o.buckets {
			for _, b := range []collective.Buffer{bk.grad, bk.master, bk.m, bk.v, bk.data, bk.blocks} {
				if b != nil {
					actual += int64(b.Len())
				}
			}
		}
		actual += int64(o.amax.Len() + o.scale.Len() + o.scaleIn.Len() + o.stats.Len())
		rep := o.Report()
		if rep.Total() != actual {
			t.Fatalf("d=%d: report %d bytes, allocated %d\n%s", d, rep.Total(), actual, rep)
		}
		pred, err := PredictMemory(params, d, Config{})
		if err != nil || pred.Total() != rep.Total() {
			t.Fatalf("d=%d: prediction %d (%v), report %d", d, pred.Total(), err, rep.Total())
		}
		want := 1 + 2 + 12/float64(d)
		if got := rep.BytesPerParam(); math.Abs(got-want) > 1e-3 {
			t.Fatalf("d=%d: %.5f bytes/param, want %.5f", d, got, want)
		}
	}
}

// TestInitFailureOnOneRank: an initial value missing on one rank makes New
// fail on every rank (none waits for the others at a deadline).
func TestInitFailureOnOneRank(t *testing.T) {
	params := awkwardParams()
	comms := inproc.Communicators(3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			w := initWeights(params, 1)
			if r == 1 {
				delete(w, "big")
			}
			_, errs[r] = New(ctx, comms[r], NewCPU(1), params, FromMap(w), Config{Groups: testGroups()})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		switch {
		case r == 1 && !errors.Is(err, ErrUnknownParam):
			t.Fatalf("rank 1: %v, want ErrUnknownParam", err)
		case r != 1 && (!errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "rank 1")):
			t.Fatalf("rank %d: %v, want ErrRemote naming rank 1", r, err)
		}
	}
}
