package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// eachRank runs f on every rank concurrently and returns the errors.
func eachRank(stores []*Store, f func(r int, s *Store) error) []error {
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for r, s := range stores {
		wg.Go(func() { errs[r] = f(r, s) })
	}
	wg.Wait()
	return errs
}

func TestAllGatherValues(t *testing.T) {
	checkLeaks(t)
	const n = 4
	s := world(t, n, "ag")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for round := range 3 { // the same key again: calls are numbered
		errs := eachRank(s, func(r int, st *Store) error {
			got, err := st.AllGatherValues(ctx, "addr", fmt.Appendf(nil, "r%d-%d", r, round))
			if err != nil {
				return err
			}
			for p, v := range got {
				if want := fmt.Sprintf("r%d-%d", p, round); string(v) != want {
					return fmt.Errorf("value of rank %d is %q, want %q", p, v, want)
				}
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d rank %d: %v", round, r, err)
			}
		}
	}
}

// TestAllGatherValuesMissingRank: ranks whose barrier ends name the rank
// that never came, whatever the timing (the context is canceled once both
// wait on the server).
func TestAllGatherValuesMissingRank(t *testing.T) {
	checkLeaks(t)
	srv, s := worldOn(t, 3, "agm")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cancelWhenWaiting(ctx, cancel, srv, 2)
	errs := eachRank(s[:2], func(r int, st *Store) error { return st.Barrier(ctx, "b") })
	for r, err := range errs {
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "ranks [2] have not contributed") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestCheckAgreement(t *testing.T) {
	checkLeaks(t)
	s := world(t, 4, "agree")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	long := strings.Repeat("f", 200)
	tests := []struct {
		name   string
		values []string
		want   string // "" means agreement
	}{
		{"agree", []string{"x", "x", "x", "x"}, ""},
		{"one differs", []string{"a1", "b7", "a1", "a1"}, `rendezvous: ranks disagree on "layout": ranks 0, 2, 3 have "a1"; rank 1 has "b7"`},
		{"all differ", []string{"w", "x", "y", "z"}, `rendezvous: ranks disagree on "layout": rank 0 has "w"; rank 1 has "x"; rank 2 has "y"; rank 3 has "z"`},
		{"long values", []string{long, long, long, "short"},
			fmt.Sprintf(`rendezvous: ranks disagree on "layout": ranks 0, 1, 2 have %q... (200 bytes); rank 3 has "short"`, long[:maxShown])},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := eachRank(s, func(r int, st *Store) error { return st.CheckAgreement(ctx, "layout", tc.values[r]) })
			for r, err := range errs {
				if tc.want == "" {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
					continue
				}
				var de *DisagreementError
				if !errors.As(err, &de) || !errors.Is(err, ErrDisagree) {
					t.Fatalf("rank %d: %v is not a DisagreementError", r, err)
				}
				if err.Error() != tc.want {
					t.Errorf("rank %d:\n got %s\nwant %s", r, err, tc.want)
				}
			}
		})
	}
}
