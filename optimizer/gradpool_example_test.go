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

// Sharded gradients on two in-process ranks, with one pool buffer and two
// micro-batches: the backward pass writes each bucket's gradient and
// declares it ready before the next bucket needs the buffer; the view of a
// gradient ends when its bucket is declared ready.
func Example_shardedGradients() {
	params := []optimizer.Param{{Name: "w1", Shape: []int{4}}, {Name: "w2", Shape: []int{4}}}
	init := optimizer.FromMap(map[string][]float32{"w1": {1, 2, 3, 4}, "w2": {-1, -2, -3, -4}})
	cfg := optimizer.Config{LR: optimizer.Constant(0.1), MicroBatches: 2, ShardedGradients: true, GradBuffers: 1, Layout: shard.Options{BucketElements: 4}}
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
			rep := o.Report()
			var stale error
			for micro := range 2 {
				for i := len(params) - 1; i >= 0; i-- { // backward, last parameter first
					g := float32(r + micro + 1)
					v, err := o.Grad(params[i].Name)
					if err == nil {
						err = errors.Join(o.SetGrad(params[i].Name, []float32{g, g, g, g}), o.GradReady(params[i].Name))
					}
					if err != nil {
						out[r] = err.Error()
						return
					}
					stale = v.Valid()
				}
			}
			if _, err := o.Step(ctx); err != nil {
				out[r] = err.Error()
				return
			}
			w1, _ := o.Weights("w1")
			out[r] = fmt.Sprintf("rank %d: view after GradReady: %v; gradient bytes %d shard + %d pool; w1 %v", r, errors.Is(stale, optimizer.ErrGradPool), rep.Get(optimizer.BufGradShard), rep.Get(optimizer.BufGradPool), w1)
		})
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// rank 0: view after GradReady: true; gradient bytes 512 shard + 512 pool; w1 [0.9053571 1.95 2.7857141 3.9]
	// rank 1: view after GradReady: true; gradient bytes 512 shard + 512 pool; w1 [0.9053571 1.95 2.7857141 3.9]
}
