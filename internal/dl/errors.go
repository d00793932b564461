package dl

import (
	"errors"
	"fmt"
)

var (
	// ErrOpen marks a library that could not be opened: it is missing, or
	// one of its own dependencies is.
	ErrOpen = errors.New("dl: cannot open library")
	// ErrSymbol marks a symbol that the library does not define.
	ErrSymbol = errors.New("dl: symbol not found")
	// ErrClosed is returned by Lookup and Close on a closed Library.
	ErrClosed = errors.New("dl: library closed")
	// ErrClose marks a dlclose that the loader refused.
	ErrClose = errors.New("dl: cannot close library")
	// ErrUnsupported is returned by Open where dynamic loading is not
	// available (a build without cgo, or an operating system other than
	// Linux).
	ErrUnsupported = errors.New("dl: dynamic loading not supported in this build")
)

// Error is a failed loader call with the loader's own message.
type Error struct {
	Op      string // "open", "lookup" or "close"
	Name    string // the library name or path, or the symbol looked up
	Message string // dlerror's text; may be empty
	Kind    error  // ErrOpen, ErrSymbol, ErrClosed, ErrClose or ErrUnsupported
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%v: %s %s", e.Kind, e.Op, e.Name)
	}
	return fmt.Sprintf("%v: %s %s: %s", e.Kind, e.Op, e.Name, e.Message)
}

// Unwrap returns the sentinel that classifies the error.
func (e *Error) Unwrap() error { return e.Kind }
