package single

import (
	"fmt"
	"sync/atomic"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// Copier copies n bytes between buffers of the communicator's memory kind.
// Device communicators need one (host ones copy themselves).
type Copier func(dst, src buffer.Buffer) error

// Comm is a one-rank communicator.
type Comm struct {
	mem    buffer.MemoryKind
	copy   Copier
	closed atomic.Bool
}

// New returns a one-rank communicator for buffers of kind mem. For Device
// memory, copy moves bytes between distinct buffers; it may be nil when
// every operation is in place (as the optimizer issues them).
func New(mem buffer.MemoryKind, copy Copier) *Comm { return &Comm{mem: mem, copy: copy} }

// Rank returns 0.
func (c *Comm) Rank() int { return 0 }

// Size returns 1.
func (c *Comm) Size() int { return 1 }

// Memory returns the memory kind given to New.
func (c *Comm) Memory() buffer.MemoryKind { return c.mem }

// Close marks the communicator closed.
func (c *Comm) Close() error {
	c.closed.Store(true)
	return nil
}

// Start runs the group at once and returns its result.
func (c *Comm) Start(ops ...collective.Op) collective.Work {
	if c.closed.Load() {
		return collective.DoneWork{Err: collective.ErrClosed}
	}
	for _, op := range ops {
		if err := op.Validate(1, c.mem); err != nil {
			return collective.DoneWork{Err: err}
		}
	}
	for _, op := range ops {
		if op.Kind == collective.OpBarrier || op.Kind == collective.OpBroadcast {
			continue
		}
		if err := c.move(op.Dst, op.Src); err != nil {
			return collective.DoneWork{Err: fmt.Errorf("single: %s: %w", op.Kind, err)}
		}
	}
	return collective.DoneWork{}
}

// move copies src to dst unless they are the same bytes. For one rank every
// reduction is the identity: Avg of one contribution divides by one.
func (c *Comm) move(dst, src buffer.Buffer) error {
	switch d := dst.(type) {
	case buffer.HostBuffer:
		s, ok := src.(buffer.HostBuffer)
		if !ok {
			return collective.ErrMemoryKind
		}
		if len(d) > 0 && &d[0] == &s[0] {
			return nil
		}
		copy(d, s)
		return nil
	case buffer.DeviceBuffer:
		s, ok := src.(buffer.DeviceBuffer)
		if !ok {
			return collective.ErrMemoryKind
		}
		if d.Ptr == s.Ptr || d.Size == 0 {
			return nil
		}
		if c.copy == nil {
			return fmt.Errorf("out-of-place device operation without a copier: %w", collective.ErrInvalid)
		}
		return c.copy(dst, src)
	}
	return collective.ErrMemoryKind
}

var _ collective.Communicator = (*Comm)(nil)
