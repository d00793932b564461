// Package single provides the communicator of a world of one rank, for host
// or device memory: every operation is the identity (a copy where source
// and destination differ). It lets the optimizer run on one GPU without
// NCCL, and serves as the trivial reference of the collective semantics.
package single
