package cudnn

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// EnvLibrary is the environment variable that names the library to open
// (a path, or a name the dynamic loader searches for). When set, nothing
// else is tried.
const EnvLibrary = "CUDNN_LIBRARY"

// LibraryNames are the names Default tries, in order, when CUDNN_LIBRARY
// is not set: the soname the dynamic loader searches for, then the usual
// install places (the CUDA toolkit's, the distribution's). LibraryGlobs
// follow.
var LibraryNames = []string{
	"libcudnn.so.9",
	"/usr/local/cuda/lib64/libcudnn.so.9",
	"/usr/lib/x86_64-linux-gnu/libcudnn.so.9",
	"/usr/lib/aarch64-linux-gnu/libcudnn.so.9",
}

// LibraryGlobs are the patterns of the Python wheels that ship cuDNN 9
// (nvidia-cudnn-cu12 and -cu13, as PyTorch and JAX install them), tried
// after LibraryNames in the order of the patterns, each pattern's matches
// sorted.
var LibraryGlobs = []string{
	"/opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
	"/opt/*/.venv/lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
	"/usr/local/lib/python3*/dist-packages/nvidia/cudnn/lib/libcudnn.so.9",
	"/usr/lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
	"$HOME/.local/lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
}

// subLibraries are the parts of cuDNN 9 that libcudnn.so.9 opens by name.
// Open loads those found beside a library given by path first, so that a
// wheel's directory needs no LD_LIBRARY_PATH.
var subLibraries = []string{"libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9",
	"libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9", "libcudnn_ops.so.9",
	"libcudnn_cnn.so.9", "libcudnn_adv.so.9"}

// MinVersion is the oldest cuDNN Open accepts (9.0.0): the backend API as
// used here (cuDNN 9's status codes, cudnnGetLastErrorString, the fused
// flash-attention patterns with the IDENTITY copy of dQ).
const MinVersion = 90000

// Library is an opened cuDNN. It is safe for concurrent use.
type Library struct {
	path    string
	version int
	fns     api
}

var defaultLib struct {
	once sync.Once
	lib  *Library
	err  error
}

// Default opens the library named by CUDNN_LIBRARY, or else the first of
// LibraryNames and LibraryGlobs that loads, once per process; later calls
// return the first call's result. The error matches ErrNoLibrary (or
// ErrTooOld when the only libraries found are older than MinVersion) and
// names every library tried with the loader's reason.
func Default() (*Library, error) {
	defaultLib.once.Do(func() { defaultLib.lib, defaultLib.err = openFirst(candidates()) })
	return defaultLib.lib, defaultLib.err
}

// candidates returns the names Default tries.
func candidates() []string {
	if p := os.Getenv(EnvLibrary); p != "" {
		return []string{p}
	}
	names := append([]string(nil), LibraryNames...)
	for _, g := range LibraryGlobs {
		m, _ := filepath.Glob(os.ExpandEnv(g))
		names = append(names, m...)
	}
	return names
}

// openFirst opens the first of names that loads and is recent enough.
func openFirst(names []string) (*Library, error) {
	var why []string
	var tooOld error
	for _, n := range names {
		l, err := Open(n)
		if err == nil {
			return l, nil
		}
		if tooOld == nil && isTooOld(err) {
			tooOld = err
		}
		why = append(why, err.Error())
	}
	if tooOld != nil {
		return nil, tooOld
	}
	return nil, fmt.Errorf("%w: tried %s (%s); install cuDNN 9 (pip install nvidia-cudnn-cu13, or -cu12, "+
		"or a PyTorch or JAX that ships it) and set %s to its libcudnn.so.9 if it is elsewhere",
		ErrNoLibrary, strings.Join(names, ", "), strings.Join(why, "; "), EnvLibrary)
}

// Open loads the cuDNN library at path (a name without a slash is searched
// for as the dynamic loader does) and checks its version. Errors match
// ErrNoLibrary (missing library or entry point) or ErrTooOld. The library
// stays loaded for the life of the process.
func Open(path string) (*Library, error) {
	if strings.Contains(path, "/") {
		preload(filepath.Dir(path))
	}
	fns, err := openTable(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoLibrary, err)
	}
	l := &Library{path: path, fns: fns, version: fns.version()}
	if l.version < MinVersion {
		return nil, fmt.Errorf("%w: %s is %s, the fused attention here needs %s or later (pip install nvidia-cudnn-cu13)",
			ErrTooOld, path, versionString(l.version), versionString(MinVersion))
	}
	return l, nil
}

// preload loads the sub-libraries of cuDNN found in dir (see
// subLibraries); those absent are left to the loader.
func preload(dir string) {
	for _, n := range subLibraries {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err == nil {
			loadOnly(p)
		}
	}
}

// Path returns the name or path the library was opened with.
func (l *Library) Path() string { return l.path }

// Version returns cudnnGetVersion: major*10000 + minor*100 + patch.
func (l *Library) Version() int { return l.version }

// String describes the library, e.g. "cuDNN 9.19.0 (libcudnn.so.9)".
func (l *Library) String() string {
	return fmt.Sprintf("cuDNN %s (%s)", versionString(l.version), l.path)
}

// versionString formats cudnnGetVersion's number: major*10000 + minor*100
// + patch from cuDNN 9 on, major*1000 + minor*100 + patch before.
func versionString(v int) string {
	if v < 10000 {
		return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}
