package optimizer_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// newRanks calls optimizer.New on 3 in-process ranks at once, each on
// cpu.New(1) with the parameters, initial values and configuration
// rank returns for it, under a deadline when timeout is positive, and
// returns the optimizers and errors by rank.
func newRanks(timeout time.Duration, rank func(r int) ([]optimizer.Param, map[string][]float32, optimizer.Config)) ([]*optimizer.Optimizer, []error) {
	comms := inproc.Communicators(3)
	opts, errs := make([]*optimizer.Optimizer, 3), make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			ctx := context.Background()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			params, init, cfg := rank(r)
			opts[r], errs[r] = optimizer.New(ctx, comms[r], cpu.New(1), params, optimizer.FromMap(init), cfg)
		})
	}
	wg.Wait()
	return opts, errs
}

// TestMismatchNamed gives one rank a different parameter shape: every rank
// fails to start with ErrMismatch naming the difference.
func TestMismatchNamed(t *testing.T) {
	_, errs := newRanks(10*time.Second, func(r int) ([]optimizer.Param, map[string][]float32, optimizer.Config) {
		params := optimizertest.AwkwardParams()
		cfg := optimizer.Config{Groups: optimizertest.Groups()}
		if r == 2 {
			params[3].Shape = []int{8192}
			cfg.Recipe = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}
		}
		return params, optimizertest.InitWeights(params, 1), cfg
	})
	for r, err := range errs {
		if !errors.Is(err, optimizer.ErrMismatch) || !strings.Contains(err.Error(), "rank 2") || !strings.Contains(err.Error(), "parameter shapes") || !strings.Contains(err.Error(), "recipe") {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestAbsentRank: a rank that never steps makes the others fail at their
// deadline, and the optimizer refuses further use.
func TestAbsentRank(t *testing.T) {
	params := optimizertest.AwkwardParams()
	opts, errs := newRanks(0, func(int) ([]optimizer.Param, map[string][]float32, optimizer.Config) {
		return params, optimizertest.InitWeights(params, 1), optimizer.Config{Groups: optimizertest.Groups()}
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	var wg sync.WaitGroup
	errs = make([]error, 2)
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
		if _, err := opts[r].Step(context.Background()); !errors.Is(err, optimizer.ErrBroken) {
			t.Fatalf("rank %d: step after failure: %v, want ErrBroken", r, err)
		}
	}
}

// TestInitFailureOnOneRank: an initial value missing on one rank makes New
// fail on every rank (none waits for the others at a deadline).
func TestInitFailureOnOneRank(t *testing.T) {
	params := optimizertest.AwkwardParams()
	_, errs := newRanks(20*time.Second, func(r int) ([]optimizer.Param, map[string][]float32, optimizer.Config) {
		w := optimizertest.InitWeights(params, 1)
		if r == 1 {
			delete(w, "big")
		}
		return params, w, optimizer.Config{Groups: optimizertest.Groups()}
	})
	for r, err := range errs {
		switch {
		case r == 1 && (!errors.Is(err, optimizer.ErrConfig) || !strings.Contains(err.Error(), `"big"`)):
			t.Fatalf("rank 1: %v, want ErrConfig naming \"big\"", err)
		case r != 1 && (!errors.Is(err, optimizer.ErrRemote) || !strings.Contains(err.Error(), "rank 1")):
			t.Fatalf("rank %d: %v, want ErrRemote naming rank 1", r, err)
		}
	}
}
