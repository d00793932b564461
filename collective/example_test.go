package collective_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
)

// Two ranks, each a goroutine, all-reduce (sum) a vector of float32.
func Example() {
	ranks := inproc.Communicators(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	results := make([][]float32, len(ranks))
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Go(func() {
			grad := []float32{1, 2, 3}
			for i := range grad {
				grad[i] *= float32(r + 1) // rank 0: 1 2 3; rank 1: 2 4 6
			}
			buf := collective.ToBytes(grad)
			// In place: Dst and Src are the same buffer.
			if err := collective.AllReduce(ctx, c, buf, buf, buffer.Float32, collective.Sum); err != nil {
				fmt.Println(err)
				return
			}
			results[r] = collective.FromBytes[float32](buf)
		})
	}
	wg.Wait()
	for _, c := range ranks {
		c.Close()
	}
	fmt.Println(results[0], results[1])
	// Output: [3 6 9] [3 6 9]
}

// StartEach starts several groups in order with one call where the
// communicator can (collective/nccl), one Start each otherwise; each group
// has its own Work.
func ExampleStartEach() {
	c := inproc.New(1)[0]
	src := buffer.HostBuffer([]byte{7})
	dsts := []buffer.HostBuffer{make(buffer.HostBuffer, 1), make(buffer.HostBuffer, 1)}
	works := collective.StartEach(c,
		[]collective.Op{{Kind: collective.OpAllGather, Dst: dsts[0], Src: src}},
		[]collective.Op{{Kind: collective.OpAllGather, Dst: dsts[1], Src: src}})
	for i, w := range works {
		if err := w.Wait(context.Background()); err != nil {
			fmt.Println(err)
		}
		fmt.Println(i, dsts[i][0])
	}
	// Output:
	// 0 7
	// 1 7
}
