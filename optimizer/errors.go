package optimizer

import (
	"errors"
	"strings"
)

// The package's sentinel errors carry no "optimizer: " prefix: every error
// returned wraps one in a message that starts with the prefix once.

var (
	// ErrConfig marks an invalid configuration or parameter list.
	ErrConfig = errors.New("invalid configuration")
	// ErrMismatch marks ranks that disagree on the layout or configuration.
	ErrMismatch = errors.New("ranks disagree")
	// ErrBroken is returned by every call after a step failed half-way
	// (a collective timed out, a peer was lost): the state on this rank can
	// no longer be trusted; restore from a checkpoint.
	ErrBroken = errors.New("state broken by an earlier failure")
	// ErrRemote reports that another rank failed at a point where all ranks
	// must agree (initial values, a checkpoint load).
	ErrRemote = errors.New("another rank failed")
	// ErrUnknownParam is returned for a parameter name not in the layout.
	ErrUnknownParam = errors.New("unknown parameter")
	// ErrClosed is returned by every call on an optimizer after Close.
	ErrClosed = errors.New("optimizer: closed")
)

var (
	// ErrGradReady marks a misuse of GradReady: a parameter declared ready
	// more often than Config.MicroBatches in one step, a Step with some
	// gradients declared and others not, or a gradient written while its
	// bucket's reduce-scatter is in flight.
	ErrGradReady = errors.New("gradient readiness out of sequence")
	// ErrNotGathered is returned by Param, Tensor and Weights for a
	// parameter whose bucket's all-gather, started by StepAsync, has not
	// been waited for (WaitParam, WaitGathers).
	ErrNotGathered = errors.New("parameter not gathered yet")
)

// ErrGradPool marks a gradient write the pool of sharded gradients cannot
// take: every buffer of the pool is lent to a bucket whose gradients have
// not all been declared ready (GradReady), or a view (Grad) used after its
// bucket was declared ready.
var ErrGradPool = errors.New("no gradient buffer for the bucket")

// unprefixed is err without its leading "optimizer: ", for wrapping in a
// message that has the prefix already; errors.Is and errors.As see err.
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.err.Error(), "optimizer: ") }

func (u unprefixed) Unwrap() error { return u.err }
