package fp8grad_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
)

// Two in-process ranks average their gradients with a reduce-scatter that
// travels in FP8 (these values are exact in E4M3 with their block scales).
func Example() {
	grads := [][]float32{{1, 2, 0.5, 4}, {3, 2, 1.5, 0}}
	shards := make([][]float32, 2)
	var wg sync.WaitGroup
	for r, inner := range inproc.Communicators(2) {
		c, err := fp8grad.New(inner, fp8grad.Config{Format: fp8.E4M3, Block: 128})
		if err != nil {
			fmt.Println(err)
			return
		}
		wg.Go(func() {
			defer c.Close()
			dst := make(buffer.HostBuffer, 8)
			err := collective.ReduceScatter(context.Background(), c, dst, collective.ToBytes(grads[r]), buffer.Float32, collective.Avg)
			if err != nil {
				fmt.Println(err)
			}
			shards[r] = collective.FromBytes[float32](dst)
		})
	}
	wg.Wait()
	fmt.Println(shards, fp8grad.WireBytesPerElement(128))
	// Output: [[2 2] [1 2]] 1.03125
}
