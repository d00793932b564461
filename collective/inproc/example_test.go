package inproc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
)

// Each rank starts a reduce-scatter (average), could compute meanwhile,
// then waits for its half of the result.
func ExampleNew() {
	comms := inproc.New(2)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	out := make([][]float32, 2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			grad := collective.ToBytes([]float32{1, 2, 3, 4})
			if r == 1 {
				grad = collective.ToBytes([]float32{3, 4, 5, 6})
			}
			shard := make(buffer.HostBuffer, len(grad)/2)
			w := c.Start(collective.Op{Kind: collective.OpReduceScatter, Dst: shard, Src: grad,
				DType: buffer.Float32, Reduce: collective.Avg})
			// ... overlap other work here ...
			if err := w.Wait(context.Background()); err != nil {
				fmt.Println(err)
				return
			}
			out[r] = collective.FromBytes[float32](shard)
		})
	}
	wg.Wait()
	fmt.Println(out[0], out[1])
	// Output: [2 3] [4 5]
}

// A rank that never arrives: the other's Wait ends at its deadline, and
// the world is aborted.
func ExampleNew_deadline() {
	comms := inproc.New(2)
	defer comms[1].Close()
	defer comms[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := collective.Barrier(ctx, comms[0]) // rank 1 never calls it
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	err = collective.Barrier(context.Background(), comms[1])
	var re *collective.RankError
	fmt.Println(errors.Is(err, collective.ErrAborted), errors.As(err, &re) && re.Rank == 0)
	// Output:
	// true
	// true true
}
