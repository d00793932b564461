package backend

import "github.com/distopt/distopt/buffer"

// Backend is where a rank's buffers live and its arithmetic runs. The CPU
// backend (optimizer/cpu) is the reference. Every other backend must
// produce the same bytes for the same arguments.
//
// Buffers returned by Alloc belong to the backend that made them. They are
// of its Memory kind, so they can be handed to a communicator of that kind.
// Methods may run asynchronously on the backend's own stream; Read and Sync
// wait for everything issued before them.
//
// A backend may also have any of the optional capabilities of
// capabilities.go. The optimizer asks for each one with a type assertion.
type Backend interface {
	// Name says what runs the step, e.g. "cpu (8 goroutines)" or "cuda:0 NVIDIA H200 (sm_90)".
	Name() string
	// Memory is the kind of the buffers the backend allocates.
	Memory() buffer.MemoryKind
	// Alloc returns n zeroed bytes.
	Alloc(n int) (buffer.Buffer, error)
	// Free releases a buffer from Alloc.
	Free(b buffer.Buffer)
	// Write copies src into dst at byte offset off.
	Write(dst buffer.Buffer, off int, src []byte) error
	// Read copies len(dst) bytes of src at byte offset off into dst.
	Read(dst []byte, src buffer.Buffer, off int) error
	// Zero sets bytes [off, off+n) of b to zero.
	Zero(b buffer.Buffer, off, n int) error
	// Sync waits for all work issued so far.
	Sync() error

	// GradStats adds to stats (StatsLen int64 values, normalised as by
	// Normalize) the exact sum of squares and the non-finite count of the
	// first n elements of grad, as AddSquare defines.
	GradStats(stats, grad buffer.Buffer, gt buffer.DType, n int) error
	// Control advances the step control block ctl (ControlBytes bytes,
	// Control's layout) by Control.Advance over the reduced statistics
	// stats. It is queued, as GradStats is.
	Control(ctl, stats buffer.Buffer) error
	// Update runs one bucket shard's update (see UpdateArgs).
	Update(a *UpdateArgs) error
	// Cast casts the segments of mode TensorCurrent and Tile with the scales
	// derived from the reduced amax (see CastArgs).
	Cast(a *CastArgs) error
	// Close releases everything the backend holds.
	Close() error
}
