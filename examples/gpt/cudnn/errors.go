package cudnn

import (
	"errors"
	"fmt"
)

var (
	// ErrNoLibrary means cuDNN could not be opened: no library of the names
	// tried, one lacking an entry point, or a build without cgo.
	ErrNoLibrary = errors.New("cudnn: cuDNN library not available")
	// ErrTooOld means the library is older than MinVersion.
	ErrTooOld = errors.New("cudnn: cuDNN library too old")
	// ErrNotSupported matches an *Error whose status is in cuDNN 9's
	// CUDNN_STATUS_NOT_SUPPORTED family (3000 to 3999), a graph for which
	// the heuristics offer no engine that finalizes, and shapes refused
	// before cuDNN is asked.
	ErrNotSupported = errors.New("cudnn: not supported")
)

// Status is a cudnnStatus_t. cuDNN 9 numbers them by family: 0 success,
// 1000s not initialized, 2000s bad parameter, 3000s not supported, 4000s
// internal error, 5000s execution failed.
type Status int32

// StatusSuccess is CUDNN_STATUS_SUCCESS.
const StatusSuccess Status = 0

// Error is a failed cuDNN call.
type Error struct {
	Op      string // the C function or descriptor step, e.g. "finalize execution plan"
	Status  Status
	Name    string // cudnnGetErrorString's name of the status
	Message string // cudnnGetLastErrorString: cuDNN's own account, when it gives one
	Detail  string // what was being done, e.g. the graph and shape
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cudnn: %s: %s (%d)", e.Op, e.Name, int32(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Detail != "" {
		s += " [" + e.Detail + "]"
	}
	return s
}

// Is makes an *Error of the not-supported family match ErrNotSupported.
func (e *Error) Is(target error) bool {
	return target == ErrNotSupported && e.Status/1000 == 3
}

// check turns the status of op into an error (nil on success), with the
// library's name of the status and its last error message.
func (l *Library) check(op string, s Status) error {
	if s == StatusSuccess {
		return nil
	}
	return &Error{Op: op, Status: s, Name: l.fns.errorString(s), Message: l.fns.lastError()}
}

// isTooOld reports whether err matches ErrTooOld.
func isTooOld(err error) bool { return errors.Is(err, ErrTooOld) }
