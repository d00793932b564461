package cuda

import (
	"errors"
	"fmt"
)

var (
	// ErrNoDriver means the CUDA driver library (libcuda.so.1) could not be
	// opened or lacks an entry point the package needs, or this build has no
	// cgo.
	ErrNoDriver = errors.New("cuda: no CUDA driver")
	// ErrNoDevice means the driver is present but reports no usable GPU (or
	// the requested ordinal does not exist).
	ErrNoDevice = errors.New("cuda: no CUDA device")
	// ErrClosed is returned by calls on a closed Device and on objects of a
	// closed Device.
	ErrClosed = errors.New("cuda: device closed")
	// ErrOutOfMemory matches an *Error whose code is
	// CUDA_ERROR_OUT_OF_MEMORY.
	ErrOutOfMemory = errors.New("cuda: out of memory")
)

// Result is a CUresult, the return code of every driver call.
type Result int

// A few driver codes the package and its callers test for.
const (
	Success          Result = 0   // CUDA_SUCCESS
	ErrorInvalidVal  Result = 1   // CUDA_ERROR_INVALID_VALUE
	ErrorOutOfMemory Result = 2   // CUDA_ERROR_OUT_OF_MEMORY
	ErrorStubLibrary Result = 34  // CUDA_ERROR_STUB_LIBRARY: the toolkit's stub, not a driver
	ErrorNoDevice    Result = 100 // CUDA_ERROR_NO_DEVICE
	ErrorInvalidPTX  Result = 218 // CUDA_ERROR_INVALID_PTX
	ErrorNotFound    Result = 500 // CUDA_ERROR_NOT_FOUND (e.g. a kernel name)
	ErrorNotReady    Result = 600 // CUDA_ERROR_NOT_READY (stream or event still busy)
)

// Error is a failed driver call.
type Error struct {
	Op     string // the driver function, e.g. "cuMemAlloc"
	Code   Result // the CUresult
	Name   string // the driver's name for Code, e.g. "CUDA_ERROR_OUT_OF_MEMORY"; may be empty
	Detail string // extra text, such as the JIT error log; may be empty
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = "CUDA error"
	}
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Op, name, int(e.Code))
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether e belongs to the class of target: ErrNoDevice for
// CUDA_ERROR_NO_DEVICE, ErrOutOfMemory for CUDA_ERROR_OUT_OF_MEMORY.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNoDevice:
		return e.Code == ErrorNoDevice
	case ErrOutOfMemory:
		return e.Code == ErrorOutOfMemory
	}
	return false
}

// check turns the result of the driver call op into an error (nil on
// success).
func check(op string, r Result) error {
	if r == Success {
		return nil
	}
	return &Error{Op: op, Code: r, Name: cuGetErrorName(r)}
}

// queried turns the result of a stream or event query into (done, error):
// CUDA_ERROR_NOT_READY is no error, only not done.
func queried(op string, r Result) (bool, error) {
	if r == ErrorNotReady {
		return false, nil
	}
	return r == Success, check(op, r)
}
