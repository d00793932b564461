// Package inproc provides an in-process collective backend. The ranks of a
// job are goroutines of one process that exchange host buffers directly.
//
// Communicators(n) returns the n ranks of one world as
// collective.Communicator values. That is the type optimizer.New and every
// other consumer takes. Drive each rank from its own goroutine.
//
// Communicators is the constructor to use. New returns the same ranks as
// *Comm, which has no methods beyond the interface. It is kept for existing
// callers.
//
// Operations are matched across ranks by sequence number. The k-th group
// started on one rank meets the k-th group of every other rank. One executor
// goroutine per world runs them in that order. It splits large operations
// over several worker goroutines. Reductions read the ranks' source buffers
// directly, and no buffer is copied as a whole. They give the results of
// collective.Reduce bit for bit.
//
// # Failures
//
// A group with an invalid op fails at once with collective.ErrInvalid or
// collective.ErrMemoryKind. It takes no sequence number. Groups whose ops
// differ across ranks fail on every rank with collective.ErrInvalid. Ops
// differ when their kind, sizes, dtype, reduction or root differ.
//
// When the context of a Wait ends first, the world is aborted. That Wait
// returns an error matching both ctx.Err() and collective.ErrAborted. Every
// other operation, pending or started later, fails on every rank. Its error
// is a *collective.RankError that names the aborting rank and wraps
// collective.ErrAborted.
//
// Close on one rank ends the world too. Its own pending and later
// operations fail with collective.ErrClosed. Those of the other ranks fail
// with a *collective.RankError that names it and wraps
// collective.ErrPeerLost. Close returns after the world's goroutines have
// exited. It may be called more than once.
package inproc
