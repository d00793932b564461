package nccl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/distopt/distopt/collective"
)

// failureKind says why a communicator stopped.
type failureKind int

const (
	// failAborted: a rank gave up (deadline, cancellation, NCCL error).
	failAborted failureKind = iota + 1
	// failClosed: a rank closed its communicator.
	failClosed
	// failLost: a rank vanished (heartbeat stalled, store unreachable).
	failLost
)

var failureWords = map[failureKind]string{failAborted: "aborted", failClosed: "closed", failLost: "lost"}

// failure is the first failure of a communicator: every group not complete
// by then fails with it.
type failure struct {
	kind    failureKind
	culprit int   // the rank that gave up, closed or vanished
	cause   error // what happened, as the later errors wrap it
	detail  string
	// local: the failure arose here (a deadline, an NCCL error), so the
	// communicator is aborted at once instead of after peerGrace.
	local bool
}

// newFailure builds the failure of culprit; detail may be empty.
func newFailure(kind failureKind, culprit int, detail string, local bool) *failure {
	var cause error
	switch kind {
	case failClosed:
		cause = fmt.Errorf("%w: %w: rank %d closed its communicator", collective.ErrAborted, collective.ErrPeerLost, culprit)
	case failLost:
		cause = fmt.Errorf("%w: %w: rank %d is gone", collective.ErrAborted, collective.ErrPeerLost, culprit)
	default:
		cause = fmt.Errorf("%w: rank %d aborted the communicator", collective.ErrAborted, culprit)
	}
	if detail != "" {
		cause = fmt.Errorf("%w (%s)", cause, detail)
	}
	return &failure{kind: kind, culprit: culprit, cause: cause, detail: detail, local: local}
}

// encode returns the report of f that peers read from the store.
func (f *failure) encode() []byte {
	return []byte(failureWords[f.kind] + " " + strconv.Itoa(f.culprit) + " " + f.detail)
}

// decodeFailure parses a report of encode; the failure is not local.
func decodeFailure(b []byte) (*failure, error) {
	word, rest, _ := strings.Cut(string(b), " ")
	num, detail, _ := strings.Cut(rest, " ")
	culprit, err := strconv.Atoi(num)
	if err != nil {
		return nil, fmt.Errorf("collective/nccl: bad failure report %q", b)
	}
	for k, w := range failureWords {
		if w == word {
			return newFailure(k, culprit, detail, false), nil
		}
	}
	return nil, fmt.Errorf("collective/nccl: bad failure report %q", b)
}

// errFor returns the error of op (a group's name) on rank self after f.
func (f *failure) errFor(self int, op string) error {
	if f.kind == failClosed && f.culprit == self {
		return &collective.RankError{Rank: self, Op: op, Err: collective.ErrClosed}
	}
	return &collective.RankError{Rank: f.culprit, Op: op, Err: f.cause}
}

// errStopped is the cause of work left unissued by Close.
var errStopped = errors.New("collective/nccl: communicator stopped")
