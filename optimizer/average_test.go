package optimizer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
)

// MeanOverRanks gives every rank the same average, against the closed form
// (1+2+3)/3 = 2 of values exact in float64.
func TestMeanOverRanks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	params := []optimizer.Param{{Name: "w", Shape: []int{4, 8}}}
	comms := inproc.Communicators(3)
	got := make([]float64, len(comms))
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := optimizer.New(ctx, c, cpu.New(1), params, optimizer.FromMap(map[string][]float32{"w": make([]float32, 32)}), optimizer.Config{LR: optimizer.Constant(1e-3)})
			if err != nil {
				errs[r] = err
				return
			}
			defer o.Close()
			got[r], errs[r] = o.MeanOverRanks(ctx, float64(r+1))
		}()
	}
	wg.Wait()
	for r := range comms {
		if errs[r] != nil || got[r] != 2 {
			t.Errorf("rank %d: %v, %v; want 2", r, got[r], errs[r])
		}
	}
}
