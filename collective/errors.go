package collective

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid marks an operation whose buffers or arguments do not fit.
	ErrInvalid = errors.New("collective: invalid operation")
	// ErrMemoryKind marks a buffer of the wrong memory kind for the backend.
	ErrMemoryKind = errors.New("collective: wrong memory kind")
	// ErrClosed is returned by operations on a closed communicator.
	ErrClosed = errors.New("collective: communicator closed")
	// ErrAborted is returned by operations on a communicator that was aborted
	// after a timeout, a cancellation or a failed peer.
	ErrAborted = errors.New("collective: communicator aborted")
	// ErrPeerLost marks the failure of a peer: it disconnected, exited, or
	// reported an error of its own.
	ErrPeerLost = errors.New("collective: peer lost")
)

// RankError is an error that concerns one rank: the peer that was lost, or
// the rank whose operation failed.
type RankError struct {
	Rank int    // the rank concerned
	Op   string // what was being done, e.g. "all-gather"
	Err  error  // the cause; often wraps ErrPeerLost
}

func (e *RankError) Error() string {
	return fmt.Sprintf("collective: %s: rank %d: %v", e.Op, e.Rank, e.Err)
}

// Unwrap returns the cause.
func (e *RankError) Unwrap() error { return e.Err }
