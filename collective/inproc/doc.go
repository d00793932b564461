// Package inproc provides an in-process collective backend: the ranks of a
// job are goroutines of one process that exchange host buffers directly.
//
// Communicators(n) returns the n ranks of one world as
// collective.Communicator values, the type optimizer.New and every other
// consumer takes; each is meant to be driven by its own goroutine. It is the
// constructor to use. New returns the same ranks as *Comm, which has no
// methods beyond the interface; it is kept for existing callers.
//
// Operations are matched across ranks by their
// sequence number (the k-th group started on one rank meets the k-th group
// of every other rank) and executed in that order by one executor goroutine
// of the world, which splits large operations over several worker
// goroutines. Reductions read the ranks' source buffers directly and give
// the results of collective.Reduce bit for bit; no buffer is copied as a
// whole.
//
// # Failures
//
// A group with an invalid op fails at once with collective.ErrInvalid or
// collective.ErrMemoryKind and takes no sequence number. Groups whose ops
// differ across ranks (kind, sizes, dtype, reduction, root) fail on every
// rank with collective.ErrInvalid.
//
// When the context of a Wait ends first, the world is aborted: that Wait
// returns an error matching ctx.Err() (and collective.ErrAborted), and every
// other operation pending or started later, on every rank, fails with a
// *collective.RankError naming the aborting rank and wrapping
// collective.ErrAborted.
//
// Close on one rank ends the world too: its own pending and later
// operations fail with collective.ErrClosed, those of the other ranks with
// a *collective.RankError naming it and wrapping collective.ErrPeerLost.
// Close returns after the world's goroutines have exited; it may be called
// more than once.
package inproc
