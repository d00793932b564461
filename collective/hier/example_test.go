package hier_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/hier"
)

// Four ranks in two groups of two: the reduce-scatter sums over all four
// ranks, the all-reduce over the two of the group.
func Example() {
	comms, err := hier.InProcess(4, 2)
	if err != nil {
		panic(err)
	}
	out := make([]string, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			ctx := context.Background()
			grads := f32([]float32{1, 2}) // the same on every rank
			shard := grads.Slice(4*c.Rank(), 4*c.Rank()+4)
			if err := collective.ReduceScatter(ctx, c, shard, grads, buffer.Float32, collective.Sum); err != nil {
				panic(err)
			}
			norm := f32([]float32{1})
			if err := collective.AllReduce(ctx, c, norm, norm, buffer.Float32, collective.Sum); err != nil {
				panic(err)
			}
			out[r] = fmt.Sprintf("rank %d (group %d, rank %d of %d): shard %v, group all-reduce %v",
				r, c.Cross().Rank(), c.Rank(), c.Size(), floats(shard.(buffer.HostBuffer)), floats(norm))
		})
	}
	wg.Wait()
	for _, s := range out {
		fmt.Println(s)
	}
	// Output:
	// rank 0 (group 0, rank 0 of 2): shard [4], group all-reduce [2]
	// rank 1 (group 0, rank 1 of 2): shard [8], group all-reduce [2]
	// rank 2 (group 1, rank 0 of 2): shard [4], group all-reduce [2]
	// rank 3 (group 1, rank 1 of 2): shard [8], group all-reduce [2]
}
