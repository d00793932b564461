package nccl

import (
	"errors"
	"testing"

	"github.com/distopt/distopt/collective"
)

func TestFailureReports(t *testing.T) {
	tests := []struct {
		kind    failureKind
		culprit int
		detail  string
		is      []error
		isNot   []error
	}{
		{failAborted, 3, "stopped waiting for all-reduce: context deadline exceeded", []error{collective.ErrAborted}, []error{collective.ErrPeerLost}},
		{failClosed, 0, "", []error{collective.ErrAborted, collective.ErrPeerLost}, nil},
		{failLost, 7, "no heartbeat for 2s, seen by rank 6", []error{collective.ErrAborted, collective.ErrPeerLost}, nil},
	}
	for _, tt := range tests {
		t.Run(failureWords[tt.kind], func(t *testing.T) {
			f := newFailure(tt.kind, tt.culprit, tt.detail, true)
			g, err := decodeFailure(f.encode())
			if err != nil {
				t.Fatal(err)
			}
			if g.kind != f.kind || g.culprit != f.culprit || g.detail != f.detail || g.local {
				t.Errorf("decode(encode(%+v)) = %+v", f, g)
			}
			err = g.errFor(1, "all-gather")
			var re *collective.RankError
			if !errors.As(err, &re) || re.Rank != tt.culprit || re.Op != "all-gather" {
				t.Fatalf("errFor = %v, want a RankError naming rank %d", err, tt.culprit)
			}
			for _, e := range tt.is {
				if !errors.Is(err, e) {
					t.Errorf("%v does not match %v", err, e)
				}
			}
			for _, e := range tt.isNot {
				if errors.Is(err, e) {
					t.Errorf("%v matches %v", err, e)
				}
			}
		})
	}
	// A rank's own Close gives ErrClosed on that rank.
	err := newFailure(failClosed, 2, "", true).errFor(2, "barrier")
	if !errors.Is(err, collective.ErrClosed) || errors.Is(err, collective.ErrAborted) {
		t.Errorf("own close: %v", err)
	}
	for _, bad := range []string{"", "aborted", "aborted x", "vanished 1 ", "lost 1"} {
		if _, err := decodeFailure([]byte(bad)); err == nil && bad != "lost 1" {
			t.Errorf("decodeFailure(%q) accepted", bad)
		}
	}
}
