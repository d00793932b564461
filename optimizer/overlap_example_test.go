package optimizer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// A training loop with the overlapped pipeline, on two in-process ranks:
// the forward pass waits for each parameter's gather just before it reads
// it, the backward pass declares each gradient ready as soon as it is
// complete (accumulated over two micro-batches), and StepAsync returns with
// the gathers in flight. Small buckets give each parameter its own.
func Example_overlap() {
	params := []optimizer.Param{ // in forward order
		{Name: "w1", Shape: []int{4}},
		{Name: "w2", Shape: []int{4}},
	}
	init := optimizer.FromMap(map[string][]float32{"w1": {1, 2, 3, 4}, "w2": {-1, -2, -3, -4}})
	cfg := optimizer.Config{LR: optimizer.Constant(0.1), MicroBatches: 2, Layout: shard.Options{BucketElements: 4}}
	comms := inproc.Communicators(2)
	out := make([]string, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			ctx := context.Background()
			o, err := optimizer.New(ctx, comms[r], cpu.New(1), params, init, cfg)
			if err != nil {
				out[r] = err.Error()
				return
			}
			defer o.Close()
			for step := range 2 {
				for _, p := range params { // forward
					if err := o.WaitParam(ctx, p.Name); err != nil {
						out[r] = err.Error()
						return
					}
					_, _ = o.Param(p.Name) // read the FP8 weights here
				}
				acc := make([]float32, len(params)) // the framework's accumulation
				for micro := range 2 {              // backward, last parameter first
					for i := len(params) - 1; i >= 0; i-- {
						acc[i] += float32(r + micro + step + 1)
						g, name := acc[i], params[i].Name
						if err := errors.Join(o.SetGrad(name, []float32{g, g, g, g}), o.GradReady(name)); err != nil {
							out[r] = err.Error()
							return
						}
					}
				}
				if _, err := o.StepAsync(ctx); err != nil {
					out[r] = err.Error()
					return
				}
			}
			_, err = o.Weights("w1")
			notYet := errors.Is(err, optimizer.ErrNotGathered)
			if err := o.WaitGathers(ctx); err != nil {
				out[r] = err.Error()
				return
			}
			w1, _ := o.Weights("w1")
			w2, _ := o.Weights("w2")
			out[r] = fmt.Sprintf("rank %d: w1 not gathered before the wait: %t; after: w1 %v w2 %v", r, notYet, w1, w2)
		})
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// rank 0: w1 not gathered before the wait: true; after: w1 [0.8144827 1.7647126 2.7149425 3.8009193] w2 [-1.1997373 -2.2495074 -3.2992775 -4.1990805]
	// rank 1: w1 not gathered before the wait: true; after: w1 [0.8144827 1.7647126 2.7149425 3.8009193] w2 [-1.1997373 -2.2495074 -3.2992775 -4.1990805]
}
