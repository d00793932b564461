package nccl

import (
	"context"
	"errors"
	"testing"
	"time"

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

// TestAwaitLostPeer checks the wait after an ncclRemoteError: the failure
// the heartbeat watcher records (naming the lost rank) is what the waiting
// group reports; with none, the wait ends at its bound and reports nothing
// (the caller then reports the NCCL error as its own); a one-rank
// communicator has no peer to wait for.
func TestAwaitLostPeer(t *testing.T) {
	comm := func(size int, peerTimeout time.Duration) *Comm {
		return &Comm{rank: 0, size: size, failedc: make(chan struct{}),
			cfg: Config{Heartbeat: time.Millisecond, PeerTimeout: peerTimeout}}
	}
	c := comm(2, time.Hour)
	lost := newFailure(failLost, 1, "no heartbeat for 15s, seen by rank 0", false)
	go func() { // the watcher
		c.mu.Lock()
		c.failure = lost
		close(c.failedc)
		c.mu.Unlock()
	}()
	if got := c.awaitLostPeer(context.Background()); got != lost {
		t.Errorf("with the watcher's failure: got %+v, want %+v", got, lost)
	}
	var re *collective.RankError
	if err := lost.errFor(0, "reduce-scatter"); !errors.As(err, &re) || re.Rank != 1 || !errors.Is(err, collective.ErrPeerLost) {
		t.Errorf("the reported error %v does not name rank 1 as lost", err)
	}
	if got := comm(2, time.Millisecond).awaitLostPeer(context.Background()); got != nil {
		t.Errorf("with no failure: got %+v, want nil after the bound", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := comm(2, time.Hour).awaitLostPeer(ctx); got != nil {
		t.Errorf("with ctx done: got %+v, want nil", got)
	}
	if got := comm(1, time.Hour).awaitLostPeer(context.Background()); got != nil {
		t.Errorf("one rank: got %+v, want nil at once", got)
	}
}
