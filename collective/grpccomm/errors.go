package grpccomm

import "errors"

var (
	// ErrConfig marks an invalid Config.
	ErrConfig = errors.New("invalid configuration")
	// ErrHandshake marks a peer that refused this rank's connection, or
	// whose connection this rank refused: the two do not belong to the same
	// communicator (Name, order of New calls, or world size differ).
	ErrHandshake = errors.New("grpccomm: handshake refused")
)

// tagged is an error with a message of its own that matches several
// sentinels under errors.Is.
type tagged struct {
	msg  string
	errs []error
}

func (e *tagged) Error() string   { return e.msg }
func (e *tagged) Unwrap() []error { return e.errs }
