// Package optimizer provides distopt's distributed optimizer: a ZeRO-1
// style optimizer whose parameters are gathered in FP8. Each data-parallel
// rank keeps the FP32 master weights and the moments of its own shard; after
// every step the shard is cast to FP8 and all-gathered, so that every rank
// holds the whole model in FP8 (and the parameters marked high-precision in
// BF16 or FP32), never a full BF16 or FP32 copy.
//
// # One step
//
// Step runs, on every rank together:
//
//  1. a reduce-scatter (average) of every bucket of gradients, in place;
//  2. the non-finite check and the global gradient norm: an exact
//     fixed-point sum of squares per rank (backend.AddSquare), then ONE small
//     all-reduce; a step with a non-finite gradient is skipped on every
//     rank alike and reported; clipping follows PyTorch's
//     clip_grad_norm_ (coefficient max_norm/(norm+1e-6), at most 1). The
//     decision (norm, clip coefficient, skip, step count, loss scaler) is
//     made in the backend's own queue, into the step control block
//     (backend.Control, Backend.Control), which the update and the cast
//     read: the gradient scale, and a skip flag that makes them write
//     nothing;
//  3. AdamW (or SGD with momentum) on the shard, fused with what the FP8
//     recipe needs: the amax of the new master, or the cast itself where
//     the scale is already known (delayed scaling, 1x128 and MXFP8 blocks);
//     on a ShardUpdater backend (the GPU's) one call, and one launch, for
//     every bucket;
//  4. ONE packed all-reduce (MAX) of every amax of the step; every rank then
//     derives the same scales, so scale_inv is never communicated (on a
//     DeviceScaler backend, for current scaling and tiles, and on a
//     DelayedScaler backend for delayed scaling's histories, in the
//     backend's own queue, without a host round trip);
//  5. the cast of the master shard into this rank's slice of the FP8 buffer
//     (on a ShardUpdater, one call for every bucket);
//  6. an all-gather of every bucket, in place, in bucket order: on a
//     ShardUpdater all started with one call once the one cast is queued
//     (collective.StartEach), on other backends each as soon as its bucket
//     is cast (so that on a device bucket b travels while bucket b+1 is
//     cast); Step waits for them, StepAsync returns with them in flight.
//
// # Exactness
//
// The per-element arithmetic is specified in optimizer/backend: every
// operation is a separately rounded float32 operation in a fixed order, and
// the norm is an exact integer sum. A run on d ranks therefore leaves masters, moments and
// FP8 bytes bit-identical to a single-rank run fed the averaged gradients,
// whatever d, and every Backend (the CPU reference here, the CUDA backend of
// optimizer/gpu) gives the same bits for the same inputs.
//
// # Moments in 8 bits
//
// Config.FirstMomentType and SecondMomentType store each moment as float32,
// bfloat16 or FP8: E4M3 codes with a float32 scale_inv per block of
// Config.MomentBlock elements (default 128), the scale a power of two
// from the block's amax, computed in the update's one pass. The first
// moment (and SGD's momentum) is stored linearly and rounded to nearest;
// the second moment is stored as its square root (half the dynamic range
// in log scale, and the quantity the update divides by, so a relative
// error of the code is the same relative error of the step) and rounded
// stochastically, so that the 0.1% a step changes it by is not rounded
// away: 16 random bits per element, hashed from the step, the bucket and
// the element's place in it (one hash for two neighbours), offset the
// float32 bits of the scaled root by less than half an E4M3 step, which
// the hardware's conversion then rounds to nearest (backend.EncodeDither,
// backend.EncodeMomentBlock). Blocks start at parameter and
// shard boundaries (the layout's alignment: FP8 buckets' Align, and
// high-precision buckets' HighPrecisionAlign, raised to the block): the
// bits stay the same at any d, and checkpoints save the decoded values,
// which encode back to themselves.
//
// # Using it
//
// New takes a collective.Communicator, a Backend of the same memory kind
// (and, for GPUs, of the same device: optimizer/gpu's Setup returns such a
// pair), the parameter list, their initial FP32 values and a Config. The framework
// writes each step's gradients into the views Grad returns (or calls
// SetGrad), calls Step, and reads the parameters through Param (FP8 bytes
// and scale_inv, in the backend's memory), Tensor or Weights. Report and
// PredictMemory give the memory of every buffer; ReadPieces, LoadPieces,
// Scalars and SetScalars serve optimizer/checkpoint.
//
// # Overlapping communication with compute
//
// Step is one block: every collective waits for the previous one. The
// overlapped pipeline runs the same stages, bucket by bucket, while the
// model computes (see Example_overlap):
//
//   - Backward: after the last write of a parameter's gradient the
//     framework calls GradReady(name). When every parameter of a bucket is
//     ready, that bucket's reduce-scatter starts at once (Communicator.Start,
//     asynchronous). Buckets start in the backward order, the reverse of the
//     parameter list, so list parameters in the order the forward pass uses
//     them: the layout puts consecutive parameters in one bucket, and the
//     buckets then complete in the order they start. A bucket complete early
//     waits for the buckets before it in that order, so that every rank
//     starts the same collectives in the same order whatever the order of
//     its GradReady calls. With Config.MicroBatches = k, gradients are
//     accumulated over k backward passes (in the views, by the framework) and
//     the reduce-scatters start at the k-th GradReady of each parameter.
//   - Step (or StepAsync) then only waits for the reduce-scatters in flight,
//     and runs phases 2 to 5 unchanged.
//   - StepAsync returns with one all-gather per bucket in flight, started in
//     bucket (forward) order. Before the next forward pass reads a parameter
//     it calls WaitParam(ctx, name) (or WaitGathers); until then Param, Tensor
//     and Weights of that parameter return ErrNotGathered. The next step
//     orders itself after the gathers nobody waited for.
//   - On a backend that reads its memory back without waiting (AsyncReader:
//     optimizer/gpu), StepAsync also leaves the step's decision on the
//     device (with delayed scaling, on a DelayedScaler backend, the amax
//     histories too): it queues every phase whatever the decision and returns a
//     Pending result; LastResult (or the next step, StepCount, LossScale,
//     Scalars) reads the control block later, waiting only when the device
//     has not got that far. Such a step waits for the device nowhere, and
//     can be captured in a CUDA graph. On a Batcher backend (optimizer/gpu)
//     its phases are queued inside one Batch: one hand-over to the device's
//     thread for the whole step.
//
// Step without GradReady is the simple path and the reference: the pipeline
// gives the same bits (the same per-bucket stages in the same order; only
// the waits move), which the tests check for every recipe, with and without
// accumulation, on in-process and gRPC ranks.
//
// Waits are on the host for host communicators. A Backend that queues its
// work on a device (DeviceOrderer: optimizer/gpu) is instead ordered after
// a collective on the device, by an event, and the host does not wait: on
// a GPU, WaitParam makes the backend's stream wait for the bucket's gather,
// and the forward pass reads the parameter on that stream; the
// reduce-scatter a GradReady starts is ordered after the gradient writes
// queued on that stream before the call (optimizer/gpu's Setup wires the
// communicator so).
//
// Misuse is reported, never a hang or a silent wrong answer: GradReady more
// than MicroBatches times, SetGrad or ZeroGrad of a bucket whose
// reduce-scatter is in flight, and a Step with some gradients declared and
// others not all return ErrGradReady (the last also breaks the optimizer:
// the other ranks then fail at their deadline or when this rank closes its
// communicator). Close waits for the collectives in flight.
//
// # Sharded gradients (ZeRO-2)
//
// With Config.ShardedGradients no rank holds a gradient for the whole
// model. A pool of Config.GradBuffers (default 2) buffers, each the size
// of the largest bucket's gradient and allocated by the backend, is lent
// to the buckets the backward pass writes: Grad or SetGrad of a parameter
// lends its bucket a zeroed buffer when it has none. When the bucket's
// last parameter is declared ready (GradReady) its reduce-scatter starts
// into the bucket's gradient shard, a GradType buffer of the shard's size
// (BFloat16 by default; GradType Float32 makes it an FP32 accumulator),
// which the norm and the update read; the buffer returns to the pool once
// the reduce-scatter completes (waited for, oldest first, when a bucket
// needs a buffer and none is free, else by Step). See Example_shardedGradients.
//
// Semantics and misuse:
//
//   - Every parameter must be declared ready MicroBatches times per step,
//     whether the step is taken with Step or StepAsync: there is no
//     full-size buffer for Step to reduce. A Step with no gradient declared
//     returns ErrGradReady and leaves the optimizer usable; one with some
//     declared and others not breaks it, as in the pipeline. A parameter
//     declared ready but never written contributes zeros.
//   - A view from Grad lies in a pooled buffer and is valid only until its
//     bucket's reduce-scatter starts (the bucket's last GradReady of the
//     micro-batch) or Step; GradView.Valid reports ErrGradPool after that.
//     Call Grad again for the next micro-batch (a fresh, zeroed buffer).
//   - Grad or SetGrad of a bucket when every buffer is lent to a bucket not
//     yet declared ready returns ErrGradPool (raise GradBuffers, or declare
//     gradients ready as they complete); a write after the parameter's
//     GradReady and before its bucket's reduce-scatter started returns
//     ErrGradReady.
//   - With MicroBatches = k > 1 the framework writes each micro-batch's own
//     gradient (not a running sum) and every bucket is reduce-scattered k
//     times: the gradient wire bytes are k times the unsharded path's. The
//     reduced shards are added in micro-batch order, in float32 rounded to
//     GradType (GradAccumulator: the CPU backend and optimizer/gpu have it;
//     New refuses k > 1 on a backend without). This reduces then accumulates,
//     where the unsharded path accumulates then reduces: the bits are the
//     same when the sums are exact (the tests check it so, and bit for bit
//     for any gradients with one micro-batch), not in general.
//
// Memory: gradient bytes per rank are GradBuffers x the largest bucket plus
// the shard, instead of the whole model: 1 + (2 + 4 + moments)/d bytes per
// parameter plus the pool (PredictMemory, Report and `distopt plan
// -sharded-grads` count it).
//
// # For backend authors
//
// A user of the optimizer picks a Backend (optimizer/cpu, or optimizer/gpu) and
// needs nothing else. The contract between the optimizer and a Backend
// (UpdateArgs, CastArgs, segment tables, the per-element arithmetic, the
// definition of each update rule) is package optimizer/backend;
// optimizer/backendtest checks a Backend against the CPU reference, byte
// for byte. CONTRIBUTING.md lists the files to change to add an update rule
// or an FP8 recipe.
//
// Errors: ErrConfig for a bad configuration, ErrMismatch when ranks
// disagree on the layout or configuration (naming what differs),
// ErrUnknownParam, ErrRemote when another rank failed, ErrGradReady and
// ErrNotGathered for misuse of the overlapped pipeline, ErrGradPool for a
// gradient the sharded gradients' pool cannot take, and ErrBroken for
// every call after a step failed half-way (a timed-out collective, a lost
// peer): the state can no longer be trusted and must be restored from a
// checkpoint.
package optimizer
