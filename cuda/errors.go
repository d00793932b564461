package cuda

import (
	icuda "github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/ptxgen"
)

// Errors of the binding, matched with errors.Is. A failing driver call
// returns an error whose text names the driver function and its code.
var (
	// ErrNoDriver means libcuda.so.1 could not be opened, or this build has
	// no cgo.
	ErrNoDriver = icuda.ErrNoDriver
	// ErrNoDevice means the driver sees no usable GPU, or not the ordinal
	// asked for.
	ErrNoDevice = icuda.ErrNoDevice
	// ErrClosed is returned by calls on a closed Device and on its objects.
	ErrClosed = icuda.ErrClosed
	// ErrOutOfMemory matches a failed allocation for want of device memory.
	ErrOutOfMemory = icuda.ErrOutOfMemory
	// ErrUnsupported means a device cannot run a Library's variant (below
	// compute capability 8.0, or below 9.0 for SM90).
	ErrUnsupported = ptxgen.ErrUnsupported
)
