package grpccomm_test

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/rendezvous"
)

// checkLeaks fails t if goroutines started during the test are still
// running a while after it.
func checkLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// inProcess connects n ranks of one process (goroutines) through a store
// served on loopback; everything is closed at the end of t.
func inProcess(t testing.TB, n int, cfg grpccomm.Config) []*grpccomm.Comm {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rendezvous.Serve(lis)
	port := lis.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stores := make([]*rendezvous.Store, n)
	comms := make([]*grpccomm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			rc := rendezvous.Config{Rank: r, WorldSize: n, LocalRank: r, LocalWorldSize: n,
				MasterAddr: "127.0.0.1", MasterPort: port, RunID: t.Name(), CloseTimeout: time.Second}
			if stores[r], errs[r] = rendezvous.Dial(ctx, rc); errs[r] == nil {
				comms[r], errs[r] = grpccomm.New(ctx, stores[r], cfg)
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				if comms[r] != nil {
					comms[r].Close()
				}
				if stores[r] != nil {
					stores[r].Close()
				}
			})
		}
		wg.Wait()
		srv.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return comms
}

func TestConformance(t *testing.T) {
	checkLeaks(t)
	opts := collectivetest.Options{Seed: 3, Sizes: []int{1, 2, 3, 4}}
	if testing.Short() || raceEnabled {
		opts.LargeBytes = 256 << 10
	}
	// Small chunks so that reductions cycle through their window of slots.
	cfg := grpccomm.Config{ChunkBytes: 64 << 10, Window: 2}
	collectivetest.Run(t, func(t *testing.T, n int) []collective.Communicator {
		comms := inProcess(t, n, cfg)
		out := make([]collective.Communicator, n)
		for r, c := range comms {
			out[r] = c
		}
		return out
	}, opts)
}
