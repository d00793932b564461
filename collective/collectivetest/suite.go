package collectivetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
)

// Run runs the suite on groups that newGroup creates: for every world size
// of opts.Sizes, the cases of RunRank on one group (one goroutine per rank),
// then the abort checks (deadline and cancellation) and the close check,
// each on a new group. newGroup returns the n ranks of a new group, element
// r being rank r; Run closes them.
func Run(t *testing.T, newGroup func(t *testing.T, n int) []collective.Communicator, opts Options) {
	o := opts.withDefaults()
	for _, n := range o.Sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			t.Run("ops", func(t *testing.T) {
				comms := newGroup(t, n)
				defer closeAll(t, comms, o)
				counter := new(atomic.Int64)
				for _, tc := range cases(n, o) {
					shared := new(memo)
					ok := t.Run(tc.name, func(t *testing.T) {
						runOnAll(t, comms, o, func(e *env) error {
							e.counter, e.shared = counter, shared
							return tc.run(e)
						})
					})
					if !ok && t.Failed() && groupDead(comms, o) {
						t.Fatal("the group no longer works; remaining cases skipped")
					}
				}
			})
			if n >= 2 {
				for _, cancel := range []bool{false, true} {
					name := "deadline"
					if cancel {
						name = "cancel"
					}
					t.Run(name, func(t *testing.T) {
						comms := newGroup(t, n)
						defer closeAll(t, comms, o)
						runOnAll(t, comms, o, func(e *env) error { return e.abortCheck(cancel) })
					})
				}
			}
			t.Run("close", func(t *testing.T) {
				comms := newGroup(t, n)
				defer closeAll(t, comms, o)
				runOnAll(t, comms, o, (*env).closeCheck)
			})
		})
	}
}

// runOnAll runs f on every rank at once and reports each rank's error.
// Rank n-1's env learns through peersDone when the others have returned.
func runOnAll(t *testing.T, comms []collective.Communicator, o Options, f func(e *env) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	n := len(comms)
	peersDone := make(chan struct{})
	var others sync.WaitGroup
	others.Add(n - 1)
	go func() {
		others.Wait()
		close(peersDone)
	}()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			e := &env{ctx: ctx, c: c, n: n, r: r, o: o, seed: o.Seed}
			if r == n-1 {
				e.peersDone = peersDone
			} else {
				defer others.Done()
			}
			errs[r] = errors.Join(f(e), e.free())
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// groupDead reports whether a barrier no longer succeeds on the group.
func groupDead(comms []collective.Communicator, o Options) bool {
	ctx, cancel := context.WithTimeout(context.Background(), o.Slack)
	defer cancel()
	dead := atomic.Bool{}
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Go(func() {
			if collective.Barrier(ctx, c) != nil {
				dead.Store(true)
			}
		})
	}
	wg.Wait()
	return dead.Load()
}

// closeAll closes every rank and fails if a Close does not return.
func closeAll(t *testing.T, comms []collective.Communicator, o Options) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for _, c := range comms {
			wg.Go(func() { c.Close() })
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(o.Slack + o.Deadline):
		t.Errorf("Close did not return within %v", o.Slack+o.Deadline)
	}
}

// RunRank runs the cases of the suite from the view of rank c.Rank(): every
// rank of the group must call it at the same time with the same seed and
// options. It returns the failures of this rank, joined, each prefixed by
// the case name; it stops at the first failure that leaves the
// communicator unusable.
func RunRank(ctx context.Context, c collective.Communicator, seed int64, opts Options) error {
	o := opts.withDefaults()
	var errs []error
	for _, tc := range cases(c.Size(), o) {
		if err := runRankCase(ctx, c, seed, o, tc.run); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tc.name, err))
			if fatal(err) {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// RunRankAbort runs the deadline check from the view of rank c.Rank() (the
// last rank lags behind, the others time out); c is aborted afterwards.
// Every rank of a group of 2 or more must call it at the same time.
func RunRankAbort(ctx context.Context, c collective.Communicator, opts Options) error {
	return runRankCase(ctx, c, 0, opts.withDefaults(), func(e *env) error { return e.abortCheck(false) })
}

// RunRankClose runs the close check from the view of rank c.Rank() (the
// last rank closes while the others wait); every rank must call it at the
// same time, and close c afterwards.
func RunRankClose(ctx context.Context, c collective.Communicator, opts Options) error {
	return runRankCase(ctx, c, 0, opts.withDefaults(), (*env).closeCheck)
}

func runRankCase(ctx context.Context, c collective.Communicator, seed int64, o Options, f func(e *env) error) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	e := &env{ctx: ctx, c: c, n: c.Size(), r: c.Rank(), o: o, seed: seed}
	return errors.Join(f(e), e.free())
}
