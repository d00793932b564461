package inproc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/inproc"
)

// checkLeaks: see collectivetest.CheckGoroutines.
func checkLeaks(t *testing.T) { collectivetest.CheckGoroutines(t) }

func TestConformance(t *testing.T) {
	checkLeaks(t)
	opts := collectivetest.Options{Seed: 1}
	if raceEnabled || testing.Short() {
		// Large enough for the executor's parallel path (512 KiB).
		opts.LargeBytes = 256 << 10
	}
	collectivetest.Run(t, func(t *testing.T, n int) []collective.Communicator {
		return inproc.Communicators(n)
	}, opts)
}

// onAll runs f on every rank at once and returns the errors by rank.
func onAll(comms []*inproc.Comm, f func(c *inproc.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() { errs[r] = f(c) })
	}
	wg.Wait()
	return errs
}

func closeAll(comms []*inproc.Comm) {
	for _, c := range comms {
		c.Close()
	}
}

func TestRunRank(t *testing.T) {
	checkLeaks(t)
	opts := collectivetest.Options{LargeBytes: 64 << 10, Deadline: 100 * time.Millisecond}
	ctx := context.Background()
	tests := []struct {
		name string
		f    func(c *inproc.Comm) error
	}{
		{"cases", func(c *inproc.Comm) error { return collectivetest.RunRank(ctx, c, 7, opts) }},
		{"abort", func(c *inproc.Comm) error { return collectivetest.RunRankAbort(ctx, c, opts) }},
		{"close", func(c *inproc.Comm) error { return collectivetest.RunRankClose(ctx, c, opts) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			comms := inproc.New(3)
			defer closeAll(comms)
			for r, err := range onAll(comms, tc.f) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

func TestMismatchedGroups(t *testing.T) {
	checkLeaks(t)
	comms := inproc.New(2)
	defer closeAll(comms)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := onAll(comms, func(c *inproc.Comm) error {
		buf := make(buffer.HostBuffer, 8*(c.Rank()+1)) // 8 bytes on rank 0, 16 on rank 1
		return collective.AllReduce(ctx, c, buf, buf, buffer.Float32, collective.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, collective.ErrInvalid) {
			t.Errorf("rank %d: got %v, want ErrInvalid", r, err)
		}
	}
	// The mismatch took its sequence number on both ranks; the next op works.
	errs = onAll(comms, func(c *inproc.Comm) error { return collective.Barrier(ctx, c) })
	for r, err := range errs {
		if err != nil {
			t.Errorf("barrier after mismatch, rank %d: %v", r, err)
		}
	}
}

func TestWaitFromSeveralGoroutines(t *testing.T) {
	checkLeaks(t)
	comms := inproc.New(2)
	defer closeAll(comms)
	ctx := context.Background()
	w0 := comms[0].Start(collective.Op{Kind: collective.OpBarrier})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := w0.Wait(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	if err := collective.Barrier(ctx, comms[1]); err != nil {
		t.Error(err)
	}
	wg.Wait()
}

// TestAbortDuringLargeOp: a Wait that gives up while the executor is
// copying must not return before the executor has let go of its buffers
// (the race detector sees the writes below otherwise).
func TestAbortDuringLargeOp(t *testing.T) {
	checkLeaks(t)
	const size = 8 << 20
	for _, d := range []time.Duration{0, 100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond} {
		comms := inproc.New(2)
		bufs := [][]byte{make([]byte, size), make([]byte, size)}
		errs := onAll(comms, func(c *inproc.Comm) error {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			buf := buffer.HostBuffer(bufs[c.Rank()])
			err := collective.AllReduce(ctx, c, buf, buf, buffer.Float32, collective.Sum)
			clear(buf) // the buffer is ours again
			return err
		})
		for r, err := range errs {
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, collective.ErrAborted) {
				t.Errorf("deadline %v, rank %d: %v", d, r, err)
			}
		}
		closeAll(comms)
	}
}

func TestNewPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(0) did not panic")
		}
	}()
	inproc.New(0)
}

// otherHost is host memory of a type the backend cannot read.
type otherHost struct{ n int }

func (b otherHost) Len() int                       { return b.n }
func (b otherHost) Memory() buffer.MemoryKind      { return buffer.Host }
func (b otherHost) Slice(lo, hi int) buffer.Buffer { return otherHost{hi - lo} }

func TestForeignHostBuffer(t *testing.T) {
	checkLeaks(t)
	comms := inproc.New(1)
	defer closeAll(comms)
	err := comms[0].Start(collective.Op{Kind: collective.OpBroadcast, Dst: otherHost{4}}).Wait(context.Background())
	if !errors.Is(err, collective.ErrMemoryKind) {
		t.Errorf("got %v, want ErrMemoryKind", err)
	}
}
