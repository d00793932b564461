// Package collective provides the Communicator interface through which the
// ranks of a data-parallel job exchange buffers: all-gather, reduce-scatter,
// all-reduce, broadcast, all-to-all and barrier, started asynchronously and
// waited for under a context deadline.
//
// # Backends
//
// Each backend lives in a subpackage and takes buffers of one memory kind:
//
//   - collective/inproc: ranks are goroutines of one process (tests, examples);
//   - collective/grpccomm: ranks are processes, host memory, gRPC over TCP;
//   - collective/nccl: ranks are processes, one GPU each, device memory.
//
// collective/rendezvous bootstraps the multi-process backends.
// collective/collectivetest is a conformance suite run against every backend.
//
// # Semantics shared by every backend
//
// Operations must be started in the same order on every rank (as with NCCL).
// A blocking helper (AllGather, ReduceScatter, ...) is Start followed by
// Wait. When the context given to Wait ends before the operation completes,
// the communicator is aborted: Wait returns an error that matches ctx.Err()
// under errors.Is, and every later operation on it fails with ErrAborted.
// A peer that fails or disappears makes the operation fail on every other
// rank with a *RankError naming that peer, never a hang.
//
// Reductions are defined exactly, so that every backend can be checked
// against the reference functions of this package (see Reduce): floating
// point elements are converted to float32 (float64 for Float64), summed in
// rank order 0, 1, ..., n-1, divided by n for Avg, and rounded back to the
// element type with round-to-nearest-even. Max on floating point types treats
// NaN as larger than every number. Backends whose order is not fixed (NCCL)
// agree bit for bit whenever the sums are exact.
package collective
