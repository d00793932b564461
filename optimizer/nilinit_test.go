package optimizer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
)

// A nil InitFunc is a configuration error on every rank, not a nil
// dereference on some (it used to panic inside New).
func TestNilInitFunc(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	params := []optimizer.Param{{Name: "w", Shape: []int{4, 8}}}
	comms := inproc.Communicators(2)
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := optimizer.New(ctx, c, cpu.New(1), params, nil, optimizer.Config{LR: optimizer.Constant(1e-3)})
			if err == nil {
				o.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, optimizer.ErrConfig) {
			t.Errorf("rank %d: %v, want ErrConfig", r, err)
		}
	}
}
