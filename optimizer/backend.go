package optimizer

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// Backend is where a rank's buffers live and its arithmetic runs. The CPU
// backend (NewCPU) is the reference; every other backend must produce the
// same bytes for the same arguments.
//
// Buffers returned by Alloc belong to the backend that made them and are of
// its Memory kind, so they can be handed to a communicator of that kind.
// Methods may run asynchronously on the backend's own stream; Read and Sync
// wait for everything issued before them.
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

	// GradStats adds to stats (backend.StatsLen int64 values, normalised
	// as by backend.Normalize) the exact sum of squares and the non-finite
	// count of the first n elements of grad, as backend.AddSquare defines.
	GradStats(stats, grad buffer.Buffer, gt buffer.DType, n int) error
	// Control advances the step control block ctl (backend.ControlBytes
	// bytes, backend.Control's layout) by backend.Control.Advance over the
	// reduced statistics stats (queued, as GradStats).
	Control(ctl, stats buffer.Buffer) error
	// Update runs one bucket shard's update (see backend.UpdateArgs).
	Update(a *backend.UpdateArgs) error
	// Cast casts the segments of mode TensorCurrent and Tile with the scales
	// derived from the reduced amax (see backend.CastArgs).
	Cast(a *backend.CastArgs) error
	// Close releases everything the backend holds.
	Close() error
}

// Rule is the update rule of a step: RuleAdamW or RuleSGD in a Config (see
// package optimizer/backend for each rule's definition).
type Rule = backend.Rule

// The update rules.
const (
	// RuleNone leaves master and moments unchanged (the initial cast, and the
	// cast after a checkpoint load); a Config with it takes RuleAdamW.
	RuleNone = backend.RuleNone
	// RuleAdamW is AdamW with decoupled weight decay (backend.AdamWElem).
	RuleAdamW = backend.RuleAdamW
	// RuleSGD is SGD with momentum and coupled weight decay (backend.SGDElem).
	RuleSGD = backend.RuleSGD
)
