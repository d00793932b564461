package cublaslt

import (
	"errors"
	"fmt"
)

var (
	// ErrNoLibrary means cuBLASLt could not be opened: no library of the
	// names tried, one lacking an entry point, or a build without cgo.
	ErrNoLibrary = errors.New("cublaslt: cuBLASLt library not available")
	// ErrTooOld means the library is older than MinVersion.
	ErrTooOld = errors.New("cublaslt: cuBLASLt library too old")
	// ErrNotSupported matches an *Error whose status is
	// CUBLAS_STATUS_NOT_SUPPORTED (no kernel for this combination of types,
	// shapes, scale modes and GPU), or a heuristic query that returned no
	// algorithm.
	ErrNotSupported = errors.New("cublaslt: not supported")
	// ErrInvalid matches an *Error whose status is CUBLAS_STATUS_INVALID_VALUE.
	ErrInvalid = errors.New("cublaslt: invalid value")
)

// Status is a cublasStatus_t.
type Status int

// The codes of cublasStatus_t.
const (
	StatusSuccess         Status = 0
	StatusNotInitialized  Status = 1
	StatusAllocFailed     Status = 3
	StatusInvalidValue    Status = 7
	StatusArchMismatch    Status = 8
	StatusMappingError    Status = 11
	StatusExecutionFailed Status = 13
	StatusInternalError   Status = 14
	StatusNotSupported    Status = 15
	StatusLicenseError    Status = 16
)

var statusNames = map[Status]string{
	StatusSuccess:         "CUBLAS_STATUS_SUCCESS",
	StatusNotInitialized:  "CUBLAS_STATUS_NOT_INITIALIZED",
	StatusAllocFailed:     "CUBLAS_STATUS_ALLOC_FAILED",
	StatusInvalidValue:    "CUBLAS_STATUS_INVALID_VALUE",
	StatusArchMismatch:    "CUBLAS_STATUS_ARCH_MISMATCH",
	StatusMappingError:    "CUBLAS_STATUS_MAPPING_ERROR",
	StatusExecutionFailed: "CUBLAS_STATUS_EXECUTION_FAILED",
	StatusInternalError:   "CUBLAS_STATUS_INTERNAL_ERROR",
	StatusNotSupported:    "CUBLAS_STATUS_NOT_SUPPORTED",
	StatusLicenseError:    "CUBLAS_STATUS_LICENSE_ERROR",
}

// String returns the enum name, or "cublasStatus(n)".
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("cublasStatus(%d)", int(s))
}

// Error is a failed cuBLASLt call.
type Error struct {
	Op     string // the C function, e.g. "cublasLtMatmul"
	Status Status
	Detail string // what was being done, e.g. the shapes
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cublaslt: %s: %v", e.Op, e.Status)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// Is makes an *Error match ErrNotSupported or ErrInvalid by its status.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotSupported:
		return e.Status == StatusNotSupported
	case ErrInvalid:
		return e.Status == StatusInvalidValue
	}
	return false
}

// check turns the status of op into an error (nil on success).
func check(op string, s Status) error {
	if s == StatusSuccess {
		return nil
	}
	return &Error{Op: op, Status: s}
}
