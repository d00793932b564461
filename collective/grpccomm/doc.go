// Package grpccomm provides a collective.Communicator between processes
// over gRPC, for host memory (buffer.HostBuffer).
//
// New bootstraps through a rendezvous.Store: every rank serves one gRPC
// endpoint, publishes its address in the store, and opens one stream to
// every other rank, on which it sends all its frames for that rank. The
// service is described by hand and its messages use a codec of this package
// (no generated code). NewSub makes a sub-communicator of some of the
// job's ranks from the same store (for example a group of hierarchical
// sharding, collective/hier). Data moves directly from rank to rank in chunks of
// at most Config.ChunkBytes; memory in flight is bounded by the HTTP/2 flow
// control window (Config.StreamWindow) and, for reductions, by
// Config.Window chunks per op and peer. No buffer is copied whole.
//
// # Results
//
// All-gather, broadcast and all-to-all move bytes. Reduce-scatter and all-reduce give
// the results of collective.Reduce bit for bit: each chunk of a rank's
// block is reduced by that rank over the contributions of ranks 0..n-1 in
// rank order. All-reduce is a reduce-scatter over n parts followed by an
// all-gather of the reduced parts.
//
// # Failures
//
// A group with an invalid op fails at once (collective.ErrInvalid or
// collective.ErrMemoryKind) and takes no sequence number. A group whose ops
// differ from a peer's (kind, size, dtype, reduction, root, count) fails
// with a *collective.RankError naming that peer and wrapping
// collective.ErrInvalid, and aborts the communicator.
//
// When the context of a Wait ends first, the communicator is aborted: that
// Wait returns an error matching ctx.Err() and collective.ErrAborted; the
// streams are cut, and every other group in flight or started later fails
// with a *collective.RankError wrapping collective.ErrAborted.
//
// A peer that exits, is killed, aborts, closes with operations in flight or
// whose connection breaks makes every other rank fail: groups in flight and
// later fail with a *collective.RankError naming that peer and wrapping
// collective.ErrPeerLost and collective.ErrAborted. Detection does not wait
// for a deadline: a dead process's connections are reset by its kernel, an
// aborting peer ends its streams with a status that names the rank it
// blames (so that every survivor names the same rank), and a host that
// vanishes is caught by keepalive pings (Config.KeepaliveTime, then
// Config.KeepaliveTimeout). A peer that closed gracefully makes this rank's
// later groups fail the same way.
//
// Close on this rank makes its groups in flight and later fail with
// collective.ErrClosed. Close returns after every goroutine, stream,
// connection and the server of the communicator have ended.
//
// # Security
//
// Each endpoint refuses every call without the job's token (the secret of
// the store's Config, as rendezvous.AuthServerOption), before reading it,
// and bounds its connections as rendezvous.Guard does: one that makes no
// authenticated call within rendezvous.FirstCallTimeout is closed, and
// idle connections beyond rendezvous.MaxPendingConns close the oldest.
package grpccomm
