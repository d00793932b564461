package grpccomm_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/rendezvous"
)

// Two ranks, here goroutines of one process; in a real job each is a
// process started by `distopt run`, and rendezvous.FromEnv gives its Config.
func Example() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0") // find a free port
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make([]string, 2)
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			store, err := rendezvous.Connect(ctx, rendezvous.Config{Rank: rank, WorldSize: 2, LocalRank: rank, LocalWorldSize: 2,
				MasterAddr: "127.0.0.1", MasterPort: port, RunID: "example"})
			if err != nil {
				out[rank] = err.Error()
				return
			}
			defer store.Close()
			c, err := grpccomm.New(ctx, store, grpccomm.Config{})
			if err != nil {
				out[rank] = err.Error()
				return
			}
			defer c.Close()

			grads := collective.ToBytes([]float32{float32(rank + 1), 10, -2})
			if err := collective.AllReduce(ctx, c, grads, grads, buffer.Float32, collective.Sum); err != nil {
				out[rank] = err.Error()
				return
			}
			shards := make(buffer.HostBuffer, 4)
			mine := shards[2*rank : 2*rank+2]
			mine[0], mine[1] = byte(10*rank), byte(10*rank+1)
			if err := collective.AllGather(ctx, c, shards, mine); err != nil {
				out[rank] = err.Error()
				return
			}
			out[rank] = fmt.Sprintf("rank %d: sum %v, gathered %v", rank, collective.FromBytes[float32](grads), []byte(shards))
		})
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// rank 0: sum [3 20 -4], gathered [0 1 10 11]
	// rank 1: sum [3 20 -4], gathered [0 1 10 11]
}
