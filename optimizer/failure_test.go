package optimizer_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

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
			params := optimizertest.AwkwardParams()
			cfg := optimizer.Config{Groups: optimizertest.Groups()}
			if r == 2 {
				params[3].Shape = []int{8192}
				cfg.Recipe = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}
			}
			_, errs[r] = optimizer.New(ctx, comms[r], optimizer.NewCPU(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
		}()
	}
	wg.Wait()
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
	comms := inproc.Communicators(3)
	opts := make([]*optimizer.Optimizer, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			opts[r], err = optimizer.New(context.Background(), comms[r], optimizer.NewCPU(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), optimizer.Config{Groups: optimizertest.Groups()})
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
		if _, err := opts[r].Step(context.Background()); !errors.Is(err, optimizer.ErrBroken) {
			t.Fatalf("rank %d: step after failure: %v, want ErrBroken", r, err)
		}
	}
}

// TestInitFailureOnOneRank: an initial value missing on one rank makes New
// fail on every rank (none waits for the others at a deadline).
func TestInitFailureOnOneRank(t *testing.T) {
	params := optimizertest.AwkwardParams()
	comms := inproc.Communicators(3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			w := optimizertest.InitWeights(params, 1)
			if r == 1 {
				delete(w, "big")
			}
			_, errs[r] = optimizer.New(ctx, comms[r], optimizer.NewCPU(1), params, optimizer.FromMap(w), optimizer.Config{Groups: optimizertest.Groups()})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		switch {
		case r == 1 && !errors.Is(err, optimizer.ErrUnknownParam):
			t.Fatalf("rank 1: %v, want ErrUnknownParam", err)
		case r != 1 && (!errors.Is(err, optimizer.ErrRemote) || !strings.Contains(err.Error(), "rank 1")):
			t.Fatalf("rank %d: %v, want ErrRemote naming rank 1", r, err)
		}
	}
}
