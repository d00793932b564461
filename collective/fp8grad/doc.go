// Package fp8grad provides a Communicator wrapper whose gradient
// reduce-scatters travel in FP8 with FP32 accumulation, for runs whose
// reduce-scatter is bound by the network.
//
// # What a reduce-scatter becomes
//
// A reduce-scatter of BFloat16 or Float32 with Sum or Avg (see Encoded),
// on d ranks with n elements per shard, runs as follows on every rank:
//
//  1. Quantize: the rank's source is cut into its d pieces (piece p, the
//     elements [p*n, (p+1)*n), is rank p's shard); each piece is
//     quantized by Quantize into a wire piece of PieceBytes(n, block)
//     bytes: one float32 scale_inv per block of Config.Block elements
//     (power-of-two scales from the block's amax), then n FP8 codes
//     (Config.Format), then padding to 4 bytes.
//  2. Exchange: one all-to-all (collective.OpAllToAll) on the wrapped
//     communicator, so that rank p receives piece p of every rank.
//  3. Sum: DequantSum decodes each received piece (exactly, the scales
//     being powers of two) and adds them in float32 in rank order 0, 1,
//     ..., d-1; Avg divides the float32 sum by d. The shard is written as
//     float32, or rounded to bfloat16 (nearest, ties to even).
//
// Every other op (gathers, broadcasts, barriers, all-reduces, Max and
// integer reduce-scatters) passes through unchanged, in the same group.
// The optimizer uses the mode by being given the wrapped communicator;
// its layout, checkpoints and overlap machinery do not change.
//
// Wire bytes per element and destination: 1 + 4/Block (1.03125 with the
// default block of 128) against 2 for bfloat16 gradients.
//
// # Why an all-to-all and not a ring
//
// A ring reduce-scatter whose every hop dequantizes, adds in FP32 and
// requantizes moves the same bytes (d-1 pieces out of each rank) but
// quantizes partial sums d-1 times, so its error grows with d and the
// result depends on d and on the ring's order in ways that cannot be
// stated simply; its d-1 hops are also dependent round trips, where the
// all-to-all's d-1 transfers run at once (grouped ncclSend/ncclRecv, or
// one gRPC stream per peer). BenchmarkExchange measures both on the CPU
// (random normal gradients, E4M3, blocks of 128): the largest error of a
// reduced shard relative to its largest magnitude is 0.039, 0.037, 0.035
// for the all-to-all at d = 2, 4, 8, and 0.038, 0.065, 0.124 for the
// ring; the codec work per shard element is about the same (the ring's is
// 0.65x at d = 2, 1.1x at d = 4, 1.3x at d = 8). The all-to-all is kept.
//
// # Non-finite gradients
//
// E4M3 saturates infinities to its largest value, so non-finiteness is
// carried explicitly: a NaN or an infinity is sent as the NaN code (0x7f,
// in both formats), and the block's scale comes from its finite elements
// alone. The element dequantizes to NaN, the sum on the owner of that
// shard is NaN at exactly that element (as many non-finite elements as a
// bfloat16 reduce-scatter would give; NaN where it would give ±Inf), and
// the optimizer's non-finite check (an all-reduce over ranks) makes the
// step skip on every rank. The element alone: a whole block marked
// non-finite would also poison the bucket's padding, which a reduce-scatter
// in place writes and no gradient overwrites, so every later step would
// skip too.
//
// # What is reproducible
//
// For given gradients on each rank, the result is a pure function of
// (the d sources in rank order, Format, Block, n): bit for bit the same
// in every run, over every inner communicator (the tests check
// in-process and gRPC against the codec alone), with any grouping of the
// ops, and on any CPU (every NaN is written as one NaN); the GPU kernels
// of internal/kernels/gradfp8.cu produce the same bytes as the CPU codec
// (checked on the GPU). It depends on the number of ranks d only through
//
//   - which elements share a block: blocks start at each shard's first
//     element, so element i of the bucket is in block (i mod n) / Block of
//     its piece; when n is a multiple of Block, blocks are the same
//     aligned runs of Block elements for every d, and each rank's
//     quantized values do not depend on d;
//   - the float32 sum itself, which adds d terms in rank order (as any
//     data-parallel sum of d ranks' gradients does), and for Avg the
//     division by d.
//
// Every rank must use the same Config: a different Block changes the
// size of the all-to-all, which the inner communicator reports as
// mismatched ops; a different Format alone would go unnoticed.
//
// It is not the bfloat16 or float32 reduce-scatter of the same gradients:
// each contribution is rounded to FP8 first, with an error of at most
// half a step of the format's top binade relative to the block's amax:
// 16/224 (about 2^-3.8) for E4M3, 4096/28672 (about 2^-2.8) for E5M2.
//
// # Error feedback
//
// With Config.ErrorFeedback each rank adds to its source the residual
// (source + residual − dequantized value) it kept from the previous
// reduce-scatter of the same reduction, so that the quantization errors
// telescope instead of accumulating. A reduction is named by the op's Tag
// when it is not 0, else by its source buffer (address and length). The
// optimizer tags each bucket's gradient reduce-scatter (optimizer.GradTag),
// so the residual follows the bucket, not the buffer: with
// optimizer.Config.ShardedGradients a buffer of the pool holds a different
// bucket from one use to the next, and a run with sharded gradients gives
// the bits of the run without them with one micro-batch
// (TestShardedErrorFeedback). With
// sharded gradients and MicroBatches > 1 every micro-batch's
// reduce-scatter of a bucket carries the residual of the one before (the
// previous micro-batch's, or the last one of the previous step); the
// reduced micro-batches are then added, so the errors still telescope
// over the sum. One tag used for sources of two sizes is refused
// (collective.ErrInvalid). The residuals are not part of a checkpoint: a
// run resumed with error feedback starts from zero residuals and is not
// the bits of the uninterrupted run (without error feedback the Comm keeps
// no state between calls and it is: TestFP8GradResume in examples/gpt). The
// residual is float32 over the whole source: 4 bytes per gradient element
// on every rank (for N parameters, 4N bytes per rank, as much as the
// unsharded master weights), reported by ResidualBytes. It is off by
// default. The residual of a non-finite element is reset to 0.
//
// # On the GPU
//
// NewDevice wraps a device communicator (collective/nccl, its Compute
// stream the caller's) with the GPU codec of internal/kernels/gradfp8.cu:
// the quantization is queued on the caller's stream before the group, the
// sums after it, and Wait synchronizes that stream. The kernels give the
// CPU codec's bytes (TestGPUCodec), and a NewDevice Comm the shards of a
// New Comm over in-process ranks (TestGPUComm). optimizer/gpu wraps a
// rank's NCCL communicator with it (gpu.FP8Gradients, Rank.FP8Gradients),
// and so does the GPT example's GPU path with -grad-fp8.
//
// # Training quality
//
// examples/gpt -grad-fp8 e4m3|e5m2 [-grad-block N] [-grad-ef] wraps the
// communicator of the GPT example. On its CPU path (float64 model,
// in-process ranks), a 2-layer model (hidden 32, 2 heads, FFN 128,
// context 32; 35k parameters) trained for 300 steps on the Go sources of
// GOROOT/src/strings (Go 1.26; examples/gpt/prepare -root), 16 sequences
// per step (2 ranks x 8 or 4 ranks x 4), blocks of 128, each FP8 run from
// the initial weights and batches of its bfloat16 run, gives these
// validation losses (390 validation sequences). At 2 ranks and the default
// learning rate, 3e-3 (TestFP8GradQuality in examples/gpt), after steps
// 100, 200 and 300:
//
//	bfloat16        3.3713  3.1183  3.0518
//	E4M3            3.3729  3.1096  3.0446
//	E4M3, feedback  3.3764  3.1164  3.0529
//	E5M2            3.3249  3.0900  3.0248
//	E5M2, feedback  3.3750  3.1138  3.0511
//
// The final loss against the bfloat16 run's, at 2 and 4 ranks, at the
// default learning rate and at 1e-2 (-lr 1e-2):
//
//	                lr 3e-3 d=2  d=4     lr 1e-2 d=2  d=4
//	bfloat16        3.0518       3.0540  3.0366       3.0309
//	E4M3            -0.24%       -0.08%  +0.48%       +1.11%
//	E4M3, feedback  +0.04%       -0.29%  -0.06%       -0.18%
//	E5M2            -0.88%       -0.24%  +2.36%       +1.79%
//	E5M2, feedback  -0.02%       -0.35%  -0.90%       +0.40%
//
// With error feedback every run is within 1% of the bfloat16 run; without
// it, every run at the default learning rate is, and at 1e-2 E5M2 (2.4%
// and 1.8% worse) and E4M3 at 4 ranks (1.1% worse) are not (E5M2's two
// mantissa bits give each element a rounding error of up to 2^-3 of its
// value, E4M3's three up to 2^-4). Runs at 1e-2 are noisy: the bfloat16
// run at 2 ranks with another batch order (-seed 2) ends at 3.2916, 8.4%
// above seed 1. Reproduce a run with (no -grad flags for bfloat16; -ranks 4
// -batch 4 for d = 4; -lr 1e-2)
//
//	go run ./examples/gpt/prepare -root $(go env GOROOT)/src/strings -out /tmp/strings
//	go run ./examples/gpt -data /tmp/strings -layers 2 -hidden 32 -heads 2 -ffn 128 -seq 32 \
//		-batch 8 -ranks 2 -steps 300 -eval-every 100 -eval-windows 390 -sample 0 -grad-fp8 e5m2 -grad-ef
package fp8grad
