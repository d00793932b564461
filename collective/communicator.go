package collective

import (
	"context"

	"github.com/distopt/distopt/buffer"
)

// Communicator connects the ranks of one job.
//
// Start enqueues a group of operations and returns at once; the group
// completes as a whole (NCCL group semantics: with one rank's group, the
// others' matching groups make progress together). Buffers passed to Start
// belong to the communicator until the returned Work's Wait returns.
//
// Start never blocks and never returns nil: an invalid op, a closed or
// aborted communicator all give a Work whose Wait returns the error
// (ErrInvalid, ErrMemoryKind, ErrClosed, ErrAborted).
//
// Implementations are safe for use by one goroutine per rank; Close may be
// called from any goroutine and returns after every goroutine, stream and
// connection the communicator started has ended.
type Communicator interface {
	// Rank is this rank, in [0, Size()).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Memory is the kind of buffer this communicator takes.
	Memory() buffer.MemoryKind
	// Start enqueues ops as one group.
	Start(ops ...Op) Work
	// Close releases the communicator. Operations in flight fail with ErrClosed.
	Close() error
}

// Work is a started group of operations.
type Work interface {
	// Wait blocks until the group completes, fails, or ctx ends. If ctx ends
	// first, the communicator is aborted and Wait returns an error matching
	// ctx.Err(). Wait may be called more than once; it returns the same error.
	Wait(ctx context.Context) error
}

// AllGather gathers src of every rank into dst (see OpAllGather).
func AllGather(ctx context.Context, c Communicator, dst, src buffer.Buffer) error {
	return c.Start(Op{Kind: OpAllGather, Dst: dst, Src: src}).Wait(ctx)
}

// ReduceScatter reduces src over ranks and leaves this rank's slice in dst
// (see OpReduceScatter).
func ReduceScatter(ctx context.Context, c Communicator, dst, src buffer.Buffer, dt buffer.DType, op ReduceOp) error {
	return c.Start(Op{Kind: OpReduceScatter, Dst: dst, Src: src, DType: dt, Reduce: op}).Wait(ctx)
}

// AllReduce reduces src over ranks into dst on every rank (see OpAllReduce).
func AllReduce(ctx context.Context, c Communicator, dst, src buffer.Buffer, dt buffer.DType, op ReduceOp) error {
	return c.Start(Op{Kind: OpAllReduce, Dst: dst, Src: src, DType: dt, Reduce: op}).Wait(ctx)
}

// Broadcast copies buf of rank root into buf of every rank.
func Broadcast(ctx context.Context, c Communicator, buf buffer.Buffer, root int) error {
	return c.Start(Op{Kind: OpBroadcast, Dst: buf, Root: root}).Wait(ctx)
}

// Barrier returns once every rank has entered it.
func Barrier(ctx context.Context, c Communicator) error {
	return c.Start(Op{Kind: OpBarrier}).Wait(ctx)
}

// DoneWork is a Work that has already completed with Err.
type DoneWork struct{ Err error }

// Wait returns w.Err.
func (w DoneWork) Wait(context.Context) error { return w.Err }

// GroupStarter is implemented by communicators that start several groups
// with one call more cheaply than with one Start each (collective/nccl:
// one wait for the compute stream and one hop to the device for all of
// them). StartEach(g0, g1, ...) is Start(g0...), Start(g1...), ... in that
// order: one Work per group, in the order of groups.
type GroupStarter interface {
	StartEach(groups ...[]Op) []Work
}

// StartEach starts each of groups as one group, in order: with one call
// when c is a GroupStarter, else with one Start each.
func StartEach(c Communicator, groups ...[]Op) []Work {
	if g, ok := c.(GroupStarter); ok {
		return g.StartEach(groups...)
	}
	ws := make([]Work, len(groups))
	for i, ops := range groups {
		ws[i] = c.Start(ops...)
	}
	return ws
}
