package cublaslt

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// LibraryNames are the names Default tries, in order, when CUBLASLT_LIBRARY
// is not set: the sonames the dynamic loader searches for, then the CUDA
// toolkit's usual directory (not always in the loader's path).
var LibraryNames = []string{"libcublasLt.so.13", "libcublasLt.so.12",
	"/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.12"}

// EnvLibrary is the environment variable that names the library to open (a
// path, or a name the dynamic loader searches for).
const EnvLibrary = "CUBLASLT_LIBRARY"

// MinVersion is the oldest cuBLASLt Open accepts (12.0.0): FP8 matmuls
// with per-tensor scales need it.
const MinVersion = 120000

// BlockScaleVersion is the first cuBLASLt whose Hopper kernels read 1x128
// and 128x128 block scales (12.9.0).
const BlockScaleVersion = 120900

// Library is an opened cuBLASLt. It is safe for concurrent use.
type Library struct {
	path    string
	version int
	fns     *fnTable
}

var defaultLib struct {
	once sync.Once
	lib  *Library
	err  error
}

// Default opens the library named by CUBLASLT_LIBRARY, or else the first of
// LibraryNames that loads, once per process; later calls return the first
// call's result. The error matches ErrNoLibrary and names every library
// tried with the loader's reason.
func Default() (*Library, error) {
	defaultLib.once.Do(func() {
		names := LibraryNames
		if p := os.Getenv(EnvLibrary); p != "" {
			names = []string{p}
		}
		var why []string
		for _, n := range names {
			l, err := Open(n)
			if err == nil {
				defaultLib.lib = l
				return
			}
			why = append(why, err.Error())
		}
		defaultLib.err = fmt.Errorf("%w: tried %s: %s", ErrNoLibrary, strings.Join(names, ", "), strings.Join(why, "; "))
	})
	return defaultLib.lib, defaultLib.err
}

// Open loads the cuBLASLt library at path (a name without a slash is
// searched for as the dynamic loader does) and checks its version. Errors
// match ErrNoLibrary (missing library or entry point) or ErrTooOld. The
// library stays loaded for the life of the process.
func Open(path string) (*Library, error) {
	fns, err := openTable(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoLibrary, err)
	}
	l := &Library{path: path, fns: fns, version: fns.version()}
	if l.version < MinVersion {
		return nil, fmt.Errorf("%w: %s is %s, distopt needs %s or later", ErrTooOld, path, versionString(l.version), versionString(MinVersion))
	}
	return l, nil
}

// Path returns the name or path the library was opened with.
func (l *Library) Path() string { return l.path }

// Version returns cublasLtGetVersion: major*10000 + minor*100 + patch.
func (l *Library) Version() int { return l.version }

// BlockScaling reports whether the library has the Hopper kernels for 1x128
// and 128x128 block scales (12.9 and later).
func (l *Library) BlockScaling() bool { return l.version >= BlockScaleVersion }

// String describes the library, e.g. "cuBLASLt 13.1.0 (libcublasLt.so.13)".
func (l *Library) String() string {
	return fmt.Sprintf("cuBLASLt %s (%s)", versionString(l.version), l.path)
}

func versionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}
