// Package grpccomm provides a collective.Communicator between processes
// over gRPC, for host memory (buffer.HostBuffer).
//
// # Setting up
//
// New bootstraps through a rendezvous.Store. Every rank serves one gRPC
// endpoint and publishes its address in the store. It opens one stream to
// every other rank, and sends all its frames for that rank on it. The
// service is described by hand, and its messages use a codec of this
// package. There is no generated code.
//
// NewSub makes a sub-communicator of some of the job's ranks, from the same
// store. The groups of hierarchical sharding (collective/hier) are made this
// way.
//
// Data moves directly from rank to rank, in chunks of at most
// Config.ChunkBytes. No buffer is copied whole. The HTTP/2 flow control
// window, Config.StreamWindow, bounds the memory in flight. For reductions,
// Config.Window bounds it too, in chunks per op and peer.
//
// # Results
//
// All-gather, broadcast and all-to-all move bytes. Reduce-scatter and
// all-reduce give the results of collective.Reduce bit for bit. Each rank
// reduces each chunk of its own block over the contributions of ranks
// 0..n-1, in rank order. All-reduce is a reduce-scatter over n parts,
// followed by an all-gather of the reduced parts.
//
// # Failures
//
// A group with an invalid op fails at once with collective.ErrInvalid or
// collective.ErrMemoryKind. It takes no sequence number.
//
// A group whose ops differ from a peer's fails and aborts the communicator.
// Its error is a *collective.RankError that names that peer and wraps
// collective.ErrInvalid. Ops differ when their kind, size, dtype,
// reduction, root or count differ.
//
// When the context of a Wait ends first, the communicator is aborted. That
// Wait returns an error matching ctx.Err() and collective.ErrAborted. The
// streams are cut. Every other group, in flight or started later, fails
// with a *collective.RankError wrapping collective.ErrAborted.
//
// A lost peer makes every other rank fail. A peer is lost when it exits, is
// killed or aborts, or when its connection breaks. So is a peer that closes
// with operations in flight. Groups in flight and later then fail with a
// *collective.RankError. It names that peer and wraps both
// collective.ErrPeerLost and collective.ErrAborted. A peer that closed
// gracefully makes this rank's later groups fail the same way.
//
// Detection does not wait for a deadline:
//
//   - the kernel of a dead process resets its connections;
//   - an aborting peer ends its streams with a status that names the rank
//     it blames, so every survivor names the same rank;
//   - keepalive pings catch a host that vanishes, after
//     Config.KeepaliveTime and then Config.KeepaliveTimeout.
//
// Close on this rank makes its groups in flight and later fail with
// collective.ErrClosed. Close returns after the communicator's goroutines,
// streams, connections and server have all ended.
//
// # Security
//
// Each endpoint refuses every call without the job's token, before reading
// it. The token comes from the secret of the store's Config. The check is
// the one of rendezvous.AuthServerOption.
//
// Each endpoint bounds its connections as rendezvous.Guard does. A
// connection that makes no authenticated call within
// rendezvous.FirstCallTimeout is closed. Beyond rendezvous.MaxPendingConns
// idle connections, the oldest is closed.
package grpccomm
