// Package nccl provides a collective.Communicator on NCCL: one process per
// GPU, with device buffers (buffer.DeviceBuffer).
//
// NCCL is opened at run time through internal/nccl. It is libnccl.so.2, or
// the path in $NCCL_LIBRARY, and must be 2.18 or later.
//
// # Setting up
//
// Join reads the job from the environment that the distopt launcher and
// torchrun set: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT.
// It opens GPU LOCAL_RANK, connects to the rendezvous store and calls New.
//
// New takes a store and a device from the caller. Rank 0 creates the NCCL
// unique id and passes it to the others through the store. The NCCL
// communicator is built non-blocking. So its creation, like every later
// step, can be abandoned when a context ends.
//
// # Streams
//
// Every group runs on the communicator's own stream, Comm.Stream. Groups
// run one after the other, in the order of Start. The ops of one Start are
// one NCCL group, between ncclGroupStart and ncclGroupEnd. So several
// buckets travel together.
//
// With Config.Compute set, each group first waits on the GPU for the work
// queued on that stream before its Start. Work.StreamWait makes another
// stream wait for a group's end.
//
// The host blocks only in Work.Wait. It polls the group's completion event
// and ncclCommGetAsyncError. For the first 20 ms it does not sleep between
// looks, but yields the processor. After that it looks every millisecond.
// Work.Phases tells where a group's time went.
//
// # Mapping onto NCCL
//
// All-gather and broadcast move bytes, as ncclUint8. An all-to-all is one
// ncclSend and one ncclRecv per rank in the group, itself included.
// Reductions map DType to ncclUint8, ncclBfloat16, ncclFloat32,
// ncclFloat64, ncclUint32 and ncclInt64. Ops with no elements are skipped.
// The barriers of a group become one all-reduce of 4 bytes.
//
// Sum is ncclSum, and NCCL chooses the order of the additions. It equals
// collective.Reduce bit for bit whenever the sum is exact in the element
// type. It always does with 2 ranks.
//
// Max on integers is ncclMax. Max on floating point types is exact: like
// collective.Reduce, it makes NaN the largest value. NaN comes back as the
// canonical quiet NaN, and -0 < +0.
//
// Avg on floating point types is NCCL's ncclAvg, unless Config.ExactAvg is
// set. ncclAvg equals collective.Reduce bit for bit when n is a power of
// two, no quotient x/n falls below the smallest normal number, and every
// partial sum is exact.
// Gradients that are sums of small dyadic fractions meet all of these.
//
// With Config.ExactAvg, Avg is collective.Reduce's for any values with 2
// ranks. With more ranks it is whenever the float32 or float64 sum is
// exact. For BFloat16 it doubles the bytes on the wire.
//
// See docs/DESIGN.md, "Note: NCCL reductions", for how NCCL computes each
// reduction and what was measured.
//
// # Failures
//
// A failure stops the communicator for good. The NCCL communicator is
// aborted with ncclCommAbort. It is never destroyed, since a kernel may
// hang. Every group not complete by then fails, and so does every later
// Start. The error is a *collective.RankError matching
// collective.ErrAborted.
//
// The ranks learn of each other's failures through the store:
//
//   - A Wait whose context ends aborts at once. Its error matches ctx.Err()
//     and collective.ErrAborted. The others are told, and fail their groups
//     with a RankError naming this rank.
//   - An NCCL error aborts likewise: a failed call, or one that
//     ncclCommGetAsyncError reports.
//   - Close tells the others. Their groups fail with a RankError that names
//     the closed rank and matches collective.ErrPeerLost.
//   - A killed process: every rank writes a heartbeat to the store every
//     Config.Heartbeat, and watches the next rank's. A rank whose heartbeat
//     stalls for Config.PeerTimeout is reported lost, with
//     collective.ErrPeerLost. So is rank 0 when the store it serves stops
//     answering. Groups of the other ranks then fail without waiting for
//     their deadlines.
//
// Groups already running when a peer reports a failure get 500 ms to
// complete before the abort.
package nccl
