// Package collective defines the Communicator interface, through which the
// ranks of a data-parallel job exchange buffers.
//
// The operations are all-gather, reduce-scatter, all-reduce, broadcast,
// all-to-all and barrier. They start asynchronously. They are waited for
// under a context deadline.
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
// collective/collectivetest is a conformance suite that every backend runs.
//
// # Semantics shared by every backend
//
// Every rank must start operations in the same order, as with NCCL. A
// blocking helper such as AllGather or ReduceScatter is Start followed by
// Wait.
//
// When the context given to Wait ends before the operation completes, the
// communicator is aborted. Wait returns an error that matches ctx.Err()
// under errors.Is. Every later operation on it fails with ErrAborted.
//
// A peer that fails or disappears never causes a hang. The operation fails
// on every other rank with a *RankError naming that peer.
//
// # Reductions
//
// Reductions are defined exactly. So every backend can be checked against
// the reference functions of this package; see Reduce. A reduction works
// this way:
//
//   - floating point elements are converted to float32, or to float64 for
//     Float64;
//   - they are summed in rank order 0, 1, ..., n-1;
//   - Avg divides the sum by n;
//   - the result is rounded back to the element type, to nearest even.
//
// Max on floating point types treats NaN as larger than every number.
// Backends whose order is not fixed, such as NCCL, agree bit for bit
// whenever the sums are exact.
package collective
