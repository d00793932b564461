// Package optimizer provides distopt's distributed optimizer: a ZeRO-1
// style optimizer whose parameters are gathered in FP8. Each data-parallel
// rank keeps the FP32 master weights and the moments of its own shard;
// after every step the shard is cast to FP8 and all-gathered, so that
// every rank holds the whole model in FP8 (high-precision parameters in
// BF16 or FP32), never a full BF16 or FP32 copy.
//
// Use: New takes a collective.Communicator, a backend.Backend of the same
// memory kind (cpu.New, or optimizer/gpu's Setup for a GPU), the
// parameters, their initial values (FromMap) and a Config. Each step, write the gradients
// (SetGrad, or the views of Grad), call Step, and read the parameters
// through Param, FP8HostBytes or FP8DeviceBytes, Tensor or Weights.
// PredictMemory gives the memory of every buffer before any rank exists.
//
// Step reduce-scatters the gradients, checks them and clips their norm,
// runs AdamW (or SGD with momentum) on the shard, reduces the FP8 amaxes,
// casts and all-gathers. A run on d ranks gives the same bits as one rank
// fed the averaged gradients. GradReady and StepAsync overlap these
// collectives with the model's compute (Example_overlap);
// Config.ShardedGradients shards the gradients too (ZeRO-2,
// Example_shardedGradients); Config.ExternalGradients lets a framework
// that writes every bucket's gradient in the layout lend those buffers for
// each step (BindGrads), so the optimizer holds no gradient copy;
// Config.FirstMomentType and SecondMomentType store the moments in
// bfloat16 or FP8.
//
// Errors wrap a sentinel: ErrConfig, ErrMismatch when ranks disagree,
// ErrUnknownParam, ErrRemote, ErrGradReady, ErrNotGathered, ErrGradPool,
// ErrUnbound, and ErrBroken after a step failed half-way (restore a checkpoint).
//
// docs/GUIDE.md describes the step's phases, its exactness, the FP8
// moments, the overlapped pipeline and sharded gradients in full;
// optimizer/backend is the contract for backend authors.
package optimizer
