package nccl

import (
	"errors"
	"fmt"
)

var (
	// ErrNoLibrary means NCCL could not be opened: the library is missing,
	// lacks an entry point the package needs, or this build has no cgo.
	ErrNoLibrary = errors.New("nccl: NCCL library not available")
	// ErrTooOld means the library opened is older than MinVersion.
	ErrTooOld = errors.New("nccl: NCCL library too old")
	// ErrInProgress matches an *Error whose code is ncclInProgress: a
	// non-blocking operation is still running; poll Comm.AsyncError.
	ErrInProgress = errors.New("nccl: operation in progress")
	// ErrRemote matches an *Error whose code is ncclRemoteError: a peer or
	// the network failed.
	ErrRemote = errors.New("nccl: remote error")
	// ErrInvalid matches an *Error whose code is ncclInvalidArgument or
	// ncclInvalidUsage.
	ErrInvalid = errors.New("nccl: invalid argument or usage")
	// ErrCUDA matches an *Error whose code is ncclUnhandledCudaError.
	ErrCUDA = errors.New("nccl: CUDA error")
)

// Result is an ncclResult_t.
type Result int

// The codes of ncclResult_t.
const (
	Success            Result = 0 // ncclSuccess
	UnhandledCudaError Result = 1 // ncclUnhandledCudaError: a CUDA call failed
	SystemError        Result = 2 // ncclSystemError: a system call failed
	InternalError      Result = 3 // ncclInternalError: a bug or memory corruption
	InvalidArgument    Result = 4 // ncclInvalidArgument: a bad argument
	InvalidUsage       Result = 5 // ncclInvalidUsage: a call in the wrong state or order
	RemoteError        Result = 6 // ncclRemoteError: a peer or the network failed
	InProgress         Result = 7 // ncclInProgress: a non-blocking call is still running
)

var resultNames = [...]string{
	Success:            "ncclSuccess",
	UnhandledCudaError: "ncclUnhandledCudaError",
	SystemError:        "ncclSystemError",
	InternalError:      "ncclInternalError",
	InvalidArgument:    "ncclInvalidArgument",
	InvalidUsage:       "ncclInvalidUsage",
	RemoteError:        "ncclRemoteError",
	InProgress:         "ncclInProgress",
}

// String returns the enum name of r, such as "ncclRemoteError", or
// "ncclResult(n)" for a code this package does not know.
func (r Result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("ncclResult(%d)", int(r))
}

// Error is a failed NCCL call.
type Error struct {
	Op   string // the NCCL function, e.g. "ncclAllReduce"
	Code Result
	// Text is NCCL's description of Code (ncclGetErrorString); may be empty.
	Text string
	// Detail is NCCL's message for the last failure (ncclGetLastError);
	// may be empty.
	Detail string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %s (%d)", e.Op, e.Code, int(e.Code))
	if e.Text != "" {
		s += ": " + e.Text
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether e belongs to the class of target: ErrInProgress,
// ErrRemote, ErrInvalid or ErrCUDA.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrInProgress:
		return e.Code == InProgress
	case ErrRemote:
		return e.Code == RemoteError
	case ErrInvalid:
		return e.Code == InvalidArgument || e.Code == InvalidUsage
	case ErrCUDA:
		return e.Code == UnhandledCudaError
	}
	return false
}
