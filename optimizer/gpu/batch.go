package gpu

import (
	"github.com/distopt/distopt/optimizer/backend"
)

// Batch implements backend.Batcher: fn runs on the device's worker, where
// the backend's calls, and every other call into the driver fn makes, run
// directly (one hand-over for a whole StepAsync instead of one a call).
// The NCCL communicator drives NCCL from a thread of its own (a cuda.Lane),
// so a wait in fn for a group does not wait for this thread.
func (b *Backend) Batch(fn func() error) error { return b.dev.Do(fn) }

var _ backend.Batcher = (*Backend)(nil)
