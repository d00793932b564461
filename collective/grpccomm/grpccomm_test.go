package grpccomm_test

import (
	"context"
	"errors"
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

// checkLeaks: see collectivetest.CheckGoroutines.
func checkLeaks(t *testing.T) { collectivetest.CheckGoroutines(t) }

// inProcess connects n ranks of one process (goroutines) through a store
// served on loopback; everything is closed at the end of t.
func inProcess(t testing.TB, n int, cfg grpccomm.Config) []*grpccomm.Comm {
	stores := dialStores(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	comms := make([]*grpccomm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { comms[r], errs[r] = grpccomm.New(ctx, stores[r], cfg) })
	}
	wg.Wait()
	t.Cleanup(func() { // before the stores' cleanup
		var wg sync.WaitGroup
		for _, c := range comms {
			if c != nil {
				wg.Go(func() { c.Close() })
			}
		}
		wg.Wait()
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

// onAll runs f on every rank at once and returns the errors by rank.
func onAll(comms []*grpccomm.Comm, f func(c *grpccomm.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() { errs[r] = f(c) })
	}
	wg.Wait()
	return errs
}

// TestMismatchedOps: groups that differ between two ranks fail on both
// with a *collective.RankError naming the other rank and wrapping
// collective.ErrInvalid, promptly.
func TestMismatchedOps(t *testing.T) {
	checkLeaks(t)
	ag := func(n int) collective.Op {
		return collective.Op{Kind: collective.OpAllGather, Dst: make(buffer.HostBuffer, 2*n), Src: make(buffer.HostBuffer, n)}
	}
	ar := func(dt buffer.DType, op collective.ReduceOp) collective.Op {
		b := make(buffer.HostBuffer, 16)
		return collective.Op{Kind: collective.OpAllReduce, Dst: b, Src: b, DType: dt, Reduce: op}
	}
	bc := func(root int) collective.Op {
		return collective.Op{Kind: collective.OpBroadcast, Dst: make(buffer.HostBuffer, 8), Root: root}
	}
	barrier := collective.Op{Kind: collective.OpBarrier}
	tests := []struct {
		name   string
		groups [2][]collective.Op
		want   string
	}{
		{"kind", [2][]collective.Op{{ag(8)}, {barrier}}, "all-gather of 8 bytes"},
		{"size", [2][]collective.Op{{ag(8)}, {ag(16)}}, "all-gather of 16 bytes"},
		{"dtype", [2][]collective.Op{{ar(buffer.Float32, collective.Sum)}, {ar(buffer.Int64, collective.Sum)}}, "(int64 sum)"},
		{"reduction", [2][]collective.Op{{ar(buffer.Float32, collective.Sum)}, {ar(buffer.Float32, collective.Max)}}, "(float32 max)"},
		{"root", [2][]collective.Op{{bc(0)}, {bc(1)}}, "from root 1"},
		{"group length", [2][]collective.Op{{barrier}, {barrier, barrier}}, "op 1 of 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			comms := inProcess(t, 2, grpccomm.Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := onAll(comms, func(c *grpccomm.Comm) error { return c.Start(tc.groups[c.Rank()]...).Wait(ctx) })
			for r, err := range errs {
				var re *collective.RankError
				switch {
				case !errors.As(err, &re) || re.Rank != 1-r || !errors.Is(err, collective.ErrInvalid):
					t.Errorf("rank %d: %v, want a RankError naming rank %d wrapping ErrInvalid", r, err, 1-r)
				case ctx.Err() != nil:
					t.Errorf("rank %d failed only at the deadline: %v", r, err)
				case !strings.Contains(err.Error(), "mismatched ops") || !strings.Contains(err.Error(), tc.want):
					t.Errorf("rank %d: %v does not say %q", r, err, tc.want)
				}
			}
		})
	}
}

// TestNewMissingRank: when a rank of the store never creates its
// communicator, New fails on the others at their deadline, naming it.
func TestNewMissingRank(t *testing.T) {
	checkLeaks(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rendezvous.Serve(lis)
	defer srv.Close()
	port := lis.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stores := make([]*rendezvous.Store, 3)
	var wg sync.WaitGroup
	for r := range stores {
		wg.Go(func() {
			var err error
			stores[r], err = rendezvous.Dial(ctx, rendezvous.Config{Rank: r, WorldSize: 3, LocalRank: r, LocalWorldSize: 3,
				MasterAddr: "127.0.0.1", MasterPort: port, RunID: "missing", CloseTimeout: time.Second})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, s := range stores {
			if s != nil {
				s.Close()
			}
		}
	}()
	if t.Failed() {
		return
	}
	short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	defer stop()
	start := time.Now()
	for r := range 2 {
		wg.Go(func() {
			c, err := grpccomm.New(short, stores[r], grpccomm.Config{})
			if err == nil {
				c.Close()
				t.Errorf("rank %d: New succeeded without rank 2", r)
				return
			}
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ranks [2]") {
				t.Errorf("rank %d: %v", r, err)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("New took %v with a 500ms deadline", took)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []grpccomm.Config{{ChunkBytes: 4}, {Window: -1}, {StreamWindow: 1000}, {CloseTimeout: -time.Second}}
	for _, cfg := range tests {
		if _, err := grpccomm.New(context.Background(), nil, cfg); !errors.Is(err, grpccomm.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}
