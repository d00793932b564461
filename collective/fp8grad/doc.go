// Package fp8grad provides a Communicator wrapper whose gradient
// reduce-scatters travel in FP8, with FP32 accumulation. It is for runs whose
// reduce-scatter is bound by the network.
//
// New wraps a host communicator, and NewDevice a device one. Give the
// wrapper to the optimizer in place of the communicator. Its layout,
// checkpoints and overlap do not change.
//
// # What a reduce-scatter becomes
//
// Encoded says which ops travel in FP8: reduce-scatters of BFloat16 or
// Float32 with Sum or Avg. Every other op passes through unchanged, in the
// same group: gathers, broadcasts, barriers, all-reduces, Max and integer
// reduce-scatters.
//
// On d ranks, with n elements per shard, every rank does this:
//
//  1. Quantize. Its source is cut into d pieces. Piece p holds the elements
//     [p*n, (p+1)*n), rank p's shard. Quantize codes each piece into
//     PieceBytes(n, block) bytes: one float32 scale_inv per block of
//     Config.Block elements, then n FP8 codes, then padding to 4 bytes. The
//     scales are powers of two, from each block's amax.
//  2. Exchange. One all-to-all, collective.OpAllToAll, on the wrapped
//     communicator gives rank p piece p of every rank.
//  3. Sum. DequantSum decodes each piece exactly and adds them in float32,
//     in rank order. Avg divides the sum by d. The shard is written as
//     float32, or rounded to bfloat16, to nearest even.
//
// A piece costs 1 + 4/Block bytes per element and destination:
// 1.03125 with the default block of 128, against 2 for bfloat16.
//
// # Non-finite gradients
//
// A NaN or an infinity is sent as the NaN code 0x7f, and its block's scale
// comes from the finite elements. The sum is then NaN at exactly that
// element. The optimizer's non-finite check makes the step skip on every
// rank.
//
// # What is reproducible
//
// The result is a pure function of the d sources in rank order, Format,
// Block and n. It is the same bits in every run, on every inner
// communicator, with any grouping of the ops, and on any CPU. The GPU
// kernels give the CPU codec's bytes. It depends on d only through which
// elements share a block, and through the sum itself. When n is a multiple
// of Block, each rank's quantized values do not depend on d.
//
// Every rank must use the same Config. A different Block is reported as
// mismatched ops; a different Format alone goes unnoticed.
//
// It differs from a bfloat16 or float32 reduce-scatter: each contribution is
// rounded to FP8 first. The error is at most half a step of the format's top
// binade, relative to the block's amax. That is 16/224, about 2^-3.8, for
// E4M3, and 4096/28672, about 2^-2.8, for E5M2.
//
// # Error feedback
//
// With Config.ErrorFeedback each rank adds to its source the residual it
// kept from the previous reduce-scatter of the same reduction. So the
// quantization errors telescope instead of accumulating. The op's Tag names
// a reduction; an op without a tag is named by its source buffer. The
// optimizer tags each bucket's reduce-scatter (optimizer.GradTag), so sharded
// gradients work too. One tag used for sources of two sizes is refused with
// collective.ErrInvalid.
//
// The residual is float32: 4 bytes per gradient element on every rank, as
// much as the unsharded master weights. ResidualBytes reports it. It is not
// in a checkpoint, so a resumed run starts from zero residuals. The residual
// of a non-finite element is reset to 0. Error feedback is off by default.
//
// # On the GPU
//
// NewDevice wraps a device communicator with the GPU codec of
// internal/kernels/gradfp8.cu. The communicator's Compute stream must be the
// caller's stream. The quantization is queued on that stream before the
// group, and the sums after it. Wait synchronizes the stream. optimizer/gpu
// wraps a rank's NCCL communicator this way, with gpu.FP8Gradients and
// Rank.FP8Gradients. So does examples/gpt with -grad-fp8.
//
// See docs/DESIGN.md, "Note: FP8 gradient exchange", for why the exchange is
// an all-to-all and how the rest was chosen. "Note: FP8 gradient quality"
// gives the losses of the GPT example with FP8 gradients.
package fp8grad
