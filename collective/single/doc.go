// Package single provides the communicator of a world of one rank.
//
// It works on host or device memory. Every operation is the identity: a copy
// where source and destination differ. It lets the optimizer run on one GPU
// without NCCL. It is also the trivial reference of the collective
// semantics.
package single
