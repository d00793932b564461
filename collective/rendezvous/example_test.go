package rendezvous_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/distopt/distopt/collective/rendezvous"
)

// A job of two ranks, here two goroutines; real jobs are processes started
// by `distopt run` or torchrun, and take their Config from FromEnv.
func Example() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0") // find a free port
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	out := make([]string, 2)
	for rank := range 2 {
		wg.Go(func() {
			cfg := rendezvous.Config{Rank: rank, WorldSize: 2, LocalRank: rank, LocalWorldSize: 2,
				MasterAddr: "127.0.0.1", MasterPort: port, RunID: "example"}
			store, err := rendezvous.Connect(ctx, cfg) // rank 0 serves the store
			if err != nil {
				out[rank] = err.Error()
				return
			}
			defer store.Close()
			addrs, err := store.AllGatherValues(ctx, "addr", fmt.Appendf(nil, "host%d:5000", rank))
			if err != nil {
				out[rank] = err.Error()
				return
			}
			agree := store.CheckAgreement(ctx, "layout", "fp8-e4m3/buckets=4")
			differ := store.CheckAgreement(ctx, "lr", fmt.Sprint(0.001*float64(rank+1)))
			out[rank] = fmt.Sprintf("rank %d: %q\n  %v\n  %v", rank, addrs, agree, differ)
		})
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// rank 0: ["host0:5000" "host1:5000"]
	//   <nil>
	//   rendezvous: ranks disagree on "lr": rank 0 has "0.001"; rank 1 has "0.002"
	// rank 1: ["host0:5000" "host1:5000"]
	//   <nil>
	//   rendezvous: ranks disagree on "lr": rank 0 has "0.001"; rank 1 has "0.002"
}

// Reading the configuration that torchrun or `distopt run` sets.
func ExampleFromEnv() {
	cfg, err := rendezvous.FromEnv()
	if err != nil {
		fmt.Println(err) // names each missing or invalid variable
		return
	}
	fmt.Println(cfg.Rank, cfg.WorldSize, cfg.MasterAddress())
}

// A store that only the job's ranks can use: Connect serves with
// Config.Secret on rank 0; here the server is started by hand. A client
// with another secret is refused, and learns nothing about the job.
func ExampleWithSecret() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := rendezvous.Serve(lis, rendezvous.WithSecret("s3cret"))
	defer srv.Close()
	port := lis.Addr().(*net.TCPAddr).Port

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := rendezvous.Config{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: port, Secret: "guess"}
	_, err := rendezvous.Dial(ctx, cfg)
	fmt.Println(errors.Is(err, rendezvous.ErrAuth))
	cfg.Secret = "s3cret"
	store, err := rendezvous.Dial(ctx, cfg)
	fmt.Println(err)
	store.Close()
	// Output:
	// true
	// <nil>
}
