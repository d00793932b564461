package nccl

import (
	"fmt"
	"os"
	"sync"
)

// LibraryName is the library Default opens when NCCL_LIBRARY is not set.
const LibraryName = "libnccl.so.2"

// EnvLibrary is the environment variable that names the library to open (a
// path, or a name the dynamic loader searches for).
const EnvLibrary = "NCCL_LIBRARY"

// Library is an opened NCCL. Its functions are safe for concurrent use as
// far as NCCL's are (see NCCL's documentation on thread safety: calls on one
// communicator must not run concurrently).
type Library struct {
	path    string
	version Version
	fns     *fnTable
}

var defaultLib struct {
	once sync.Once
	lib  *Library
	err  error
}

// Default opens the library named by NCCL_LIBRARY, or LibraryName, once per
// process; later calls return the first call's result. Errors are those of
// Open.
func Default() (*Library, error) {
	defaultLib.once.Do(func() {
		path := os.Getenv(EnvLibrary)
		if path == "" {
			path = LibraryName
		}
		defaultLib.lib, defaultLib.err = Open(path)
	})
	return defaultLib.lib, defaultLib.err
}

// Open loads the NCCL library at path (a name without a slash is searched
// for as the dynamic loader does) and checks its version. A library that
// cannot be opened, or that lacks one of the functions the package calls,
// gives an error matching ErrNoLibrary; one older than MinVersion an error
// matching ErrTooOld that names both versions. The library stays loaded for
// the life of the process.
func Open(path string) (*Library, error) {
	fns, err := openTable(path)
	if err != nil {
		return nil, err
	}
	l := &Library{path: path, fns: fns}
	code, err := l.getVersion()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoLibrary, path, err)
	}
	l.version = VersionFromCode(code)
	if l.version.Less(MinVersion) {
		return nil, fmt.Errorf("%w: %s is NCCL %v, distopt needs %v or later", ErrTooOld, path, l.version, MinVersion)
	}
	return l, nil
}

// Path returns the name or path the library was opened with.
func (l *Library) Path() string { return l.path }

// Version returns the library's release, as ncclGetVersion reported it.
func (l *Library) Version() Version { return l.version }

// String describes the library, e.g. "NCCL 2.28.3 (libnccl.so.2)".
func (l *Library) String() string { return fmt.Sprintf("NCCL %v (%s)", l.version, l.path) }

// check turns the result of the NCCL call op into an error (nil on
// success). comm, if not nil, is asked for its last error message.
func (l *Library) check(op string, r Result, comm *Comm) error {
	if r == Success {
		return nil
	}
	e := &Error{Op: op, Code: r, Text: l.ErrorString(r)}
	if r != InProgress {
		e.Detail = l.lastError(comm)
	}
	return e
}
