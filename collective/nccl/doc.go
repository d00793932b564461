// Package nccl provides a collective.Communicator on NCCL: one process per
// GPU, device buffers (buffer.DeviceBuffer), NCCL opened at run time
// through internal/nccl (libnccl.so.2 or $NCCL_LIBRARY, 2.18 or later).
//
// # Setting up
//
// Join reads the job from the environment that the distopt launcher and
// torchrun set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
// opens GPU LOCAL_RANK, connects to the rendezvous store and calls New. New
// takes a store and a device from the caller. Rank 0 creates the NCCL
// unique id and passes it to the others through the store; the NCCL
// communicator is built non-blocking, so that its creation, like every
// later step, can be abandoned when a context ends.
//
// # Streams
//
// Every group runs on the communicator's own stream (Comm.Stream), one after
// the other in the order of Start. With Config.Compute set, each group
// first waits, on the GPU, for the work queued on that stream before its
// Start; Work.StreamWait makes another stream wait for a group's end. The
// host only blocks in Work.Wait, which polls the group's completion event
// and ncclCommGetAsyncError: without sleeping (yielding the processor
// between looks) during its first 20 ms, since Go cannot sleep much less
// than a millisecond, and every millisecond past 20 ms. Work.Phases tells
// where a group's time went. The ops of one Start are one NCCL group
// (ncclGroupStart/End), so that several buckets travel together.
//
// # Mapping onto NCCL
//
// All-gather and broadcast move bytes (ncclUint8); an all-to-all is one
// ncclSend and one ncclRecv per rank (itself included) in the group. Reductions map DType to
// ncclUint8, ncclBfloat16, ncclFloat32, ncclFloat64, ncclUint32 and
// ncclInt64. Ops with no elements are skipped; the barriers of a group
// become one all-reduce of 4 bytes.
//
//   - Sum is ncclSum. NCCL chooses the order of the additions, each rounded
//     to the element type (bfloat16 additions round the exact sum to
//     bfloat16). It equals collective.Reduce bit for bit whenever the sum
//     is exact in the element type, and always for 2 ranks (one addition;
//     for bfloat16, rounding to float32 and then to bfloat16 as Reduce does
//     gives the same value as one rounding).
//   - Max on integers is ncclMax. Max on floating point types is exact:
//     NCCL's own uses fmax, for which a NaN loses against a number, whereas
//     collective.Reduce makes NaN the largest. The values are mapped to
//     unsigned order keys in scratch memory (bfloat16 and float32 to 32
//     bits, float64 to 64), NCCL takes the unsigned maximum, and the keys
//     are mapped back (NaN becomes the canonical quiet NaN, -0 < +0); see
//     transform.cu.
//   - Avg on floating point types is NCCL's ncclAvg unless Config.ExactAvg.
//     NCCL (2.18 to 2.28, buffers not registered as symmetric windows)
//     computes it as ncclDevPreMulSum: every rank's value x is multiplied by
//     s = 1/n rounded to the element type, the product rounded to the
//     element type, and the products are summed as for Sum. This equals
//     collective.Reduce ((x0 + ... + x(n-1)) / n, summed in float32 or
//     float64) bit for bit when n is a power of two (s is exact), no
//     product x*s falls below the smallest normal number (it is exact), and
//     every partial sum is exact; with 2 ranks the last condition reduces
//     to: x0 + x1 does not overflow float32 (float64 for Float64), where
//     Reduce gives ±Inf and NCCL a finite value. Gradients that are sums of
//     small dyadic fractions meet all of these. Measured with NCCL 2.28.3
//     on two H200s (TestNativeAvg): float32 and float64 follow this model
//     bit for bit, subnormals included; bfloat16 too, except that products
//     below the smallest normal number are sometimes left unrounded (the
//     result then matches the model with exact products). With
//     Config.ExactAvg, Avg
//     is collective.Reduce's for any values with 2 ranks, and whenever the
//     float32 (float64) sum is exact with more: Float32 and Float64 are
//     summed with ncclSum and divided by n on the GPU; BFloat16 is widened
//     to float32 in scratch memory, summed, divided and rounded to
//     bfloat16, which doubles the bytes on the wire.
//
// # Failures
//
// A failure stops the communicator for good: the NCCL communicator is
// aborted (ncclCommAbort, never destroyed while a kernel may hang), and
// every group not complete by then, and every later Start, fails with a
// *collective.RankError matching collective.ErrAborted. The ranks learn of
// each other's failures through the store:
//
//   - Wait whose context ends aborts at once; its error matches ctx.Err()
//     and collective.ErrAborted; the others are told and fail their groups
//     with a RankError naming this rank.
//   - An NCCL error (ncclCommGetAsyncError, a failed call) aborts likewise.
//   - Close tells the others, whose groups fail with a RankError naming the
//     closed rank and matching collective.ErrPeerLost.
//   - A killed process: every rank writes a heartbeat to the store
//     (Config.Heartbeat) and watches the next rank's; one that stalls for
//     Config.PeerTimeout is reported lost (collective.ErrPeerLost), and so
//     is rank 0 when the store it serves stops answering. Groups of the
//     other ranks then fail without waiting for their deadlines.
//
// Groups already running when a peer reports a failure get peerGrace
// (500 ms) to complete before the abort.
package nccl
