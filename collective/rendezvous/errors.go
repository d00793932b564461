package rendezvous

import "errors"

var (
	// ErrConfig marks a missing or invalid configuration value (an
	// environment variable or a Config field).
	ErrConfig = errors.New("invalid configuration")
	// ErrPortInUse marks a master port that another process already listens on.
	ErrPortInUse = errors.New("rendezvous: port already in use")
	// ErrMembership marks ranks that do not form one job: WORLD_SIZE differs
	// between ranks, or two processes claim the same rank. Every rank of the
	// run gets it once it is detected.
	ErrMembership = errors.New("rendezvous: ranks do not agree on the job")
	// ErrNotFound is returned by Get for a key that does not exist.
	ErrNotFound = errors.New("rendezvous: key not found")
	// ErrNotCounter is returned by Add for a key whose value is not a
	// decimal integer.
	ErrNotCounter = errors.New("rendezvous: value is not a counter")
	// ErrDisagree marks ranks that hold different values where all must hold
	// the same one (see CheckAgreement and DisagreementError).
	ErrDisagree = errors.New("rendezvous: ranks disagree")
	// ErrAuth marks a store that refused this rank's secret: its
	// DISTOPT_JOB_SECRET differs from rank 0's.
	ErrAuth = errors.New("rendezvous: store refused this rank's secret")
	// ErrLimit marks a call past one of the store's bounds (size of a key or
	// value, number of keys, bytes held, WORLD_SIZE, a counter's int64
	// range).
	ErrLimit = errors.New("rendezvous: store limit exceeded")
	// ErrClosed is returned by operations on a closed Store or Server.
	ErrClosed = errors.New("rendezvous: closed")
)
