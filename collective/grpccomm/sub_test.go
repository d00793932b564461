package grpccomm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/rendezvous"
)

// dialStores connects the n ranks of a job of one process (goroutines) to
// a store served on loopback; everything is closed at the end of t.
func dialStores(t testing.TB, n int) []*rendezvous.Store {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rendezvous.Serve(lis)
	port := lis.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stores := make([]*rendezvous.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			rc := rendezvous.Config{Rank: r, WorldSize: n, LocalRank: r, LocalWorldSize: n,
				MasterAddr: "127.0.0.1", MasterPort: port, RunID: t.Name(), CloseTimeout: time.Second}
			stores[r], errs[r] = rendezvous.Dial(ctx, rc)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, s := range stores {
			if s != nil {
				s.Close()
			}
		}
		srv.Close()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return stores
}

// subs makes, on every rank of stores at once, the sub-communicator of
// the list of members that holds it (lists are disjoint), and returns them
// by rank of the job (nil for ranks in no list). They are closed at the
// end of t.
func subs(t testing.TB, stores []*rendezvous.Store, lists [][]int, cfg grpccomm.Config) []*grpccomm.Comm {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	comms := make([]*grpccomm.Comm, len(stores))
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for _, ranks := range lists {
		for _, r := range ranks {
			wg.Go(func() { comms[r], errs[r] = grpccomm.NewSub(ctx, stores[r], ranks, cfg) })
		}
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, c := range comms {
			if c != nil {
				wg.Go(func() { c.Close() })
			}
		}
		wg.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return comms
}

// The conformance suite on a sub-communicator of n of the n+1 ranks of a
// job, in reverse order (rank i of the sub-communicator is rank n-i of the
// job; rank 0 of the job is no member).
func TestSubConformance(t *testing.T) {
	checkLeaks(t)
	opts := collectivetest.Options{Seed: 5, Sizes: []int{1, 2, 3}, LargeBytes: 256 << 10, Slack: 20 * time.Second}
	cfg := grpccomm.Config{ChunkBytes: 64 << 10, Window: 2}
	collectivetest.Run(t, func(t *testing.T, n int) []collective.Communicator {
		ranks := make([]int, n)
		for i := range ranks {
			ranks[i] = n - i
		}
		comms := subs(t, dialStores(t, n+1), [][]int{ranks}, cfg)
		out := make([]collective.Communicator, n)
		for i, r := range ranks {
			if comms[r].Rank() != i || comms[r].Size() != n {
				t.Fatalf("rank %d of the job is rank %d of %d, want %d of %d", r, comms[r].Rank(), comms[r].Size(), i, n)
			}
			out[i] = comms[r]
		}
		return out
	}, opts)
}

// The groups and cross-groups of hierarchical sharding over 6 ranks, made
// at once from one store: an all-reduce on each sums the job's ranks of
// its members, so every rank talks to its own members only.
func TestSubDisjointAtOnce(t *testing.T) {
	checkLeaks(t)
	stores := dialStores(t, 6)
	for _, lists := range [][][]int{
		{{0, 1, 2}, {3, 4, 5}}, // 2 groups of 3
		{{0, 3}, {1, 4}, {2, 5}},
		{{0, 1}, {2, 3}, {4, 5}}, // 3 groups of 2
		{{0, 2, 4}, {1, 3, 5}},
	} {
		comms := subs(t, stores, lists, grpccomm.Config{Name: "disjoint"})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		errs := make([]error, len(comms))
		var wg sync.WaitGroup
		for _, ranks := range lists {
			want := 0
			for _, r := range ranks {
				want += r + 1
			}
			for _, r := range ranks {
				wg.Go(func() {
					b := make(buffer.HostBuffer, 8)
					binary.LittleEndian.PutUint64(b, uint64(r+1))
					if err := collective.AllReduce(ctx, comms[r], b, b, buffer.Int64, collective.Sum); err != nil {
						errs[r] = err
					} else if got := binary.LittleEndian.Uint64(b); got != uint64(want) {
						errs[r] = fmt.Errorf("rank %d in %v: all-reduce %d, want %d", r, ranks, got, want)
					}
				})
			}
		}
		wg.Wait()
		cancel()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%v: %v", lists, err)
		}
	}
}

// Invalid lists of members fail at once with ErrConfig, naming the fault.
func TestSubConfigErrors(t *testing.T) {
	stores := dialStores(t, 3)
	for _, tc := range []struct {
		ranks []int
		want  string
	}{
		{nil, "without ranks"},
		{[]int{0, 1, 1}, "rank 1 appears twice"},
		{[]int{0, 3}, "rank 3 outside the job of 3 ranks"},
		{[]int{1, 2}, "does not hold this rank (0)"},
	} {
		c, err := grpccomm.NewSub(context.Background(), stores[0], tc.ranks, grpccomm.Config{})
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, grpccomm.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSub(%v) = %v, want ErrConfig saying %q", tc.ranks, err, tc.want)
		}
	}
}

// A member that never comes makes the others fail at their deadline,
// naming its key: no hang.
func TestSubMissingMember(t *testing.T) {
	checkLeaks(t)
	stores := dialStores(t, 3)
	// Long enough for the members' own keys to reach the store on a
	// loaded machine: the wait for rank 2's key is what must time out.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			c, err := grpccomm.NewSub(ctx, stores[r], []int{0, 1, 2}, grpccomm.Config{})
			if err == nil {
				c.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "/addr/2") {
			t.Errorf("rank %d: %v, want the deadline naming rank 2's address", r, err)
		}
	}
}
