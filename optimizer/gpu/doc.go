// Package gpu provides the CUDA backend of the optimizer: an
// backend.Backend whose buffers are device memory
// (buffer.DeviceBuffer) and whose arithmetic runs in the PTX kernels of
// internal/kernels, bit for bit the CPU backend's (cpu.New).
//
// # Work and ordering
//
// Every method queues its work on one compute stream (Backend.Stream): the
// gradient statistics (two launches: the exact sums, then their
// normalisation; as an backend.GradStatsPlanner the backend plans every
// bucket's gradient shard once, in a device table, so that a step's
// statistics are those two launches whatever the number of buckets), the
// fused update of a bucket shard
// (one launch over all its segments: the rule, then the amax, delayed cast,
// block casts or tile amaxes of its segments' modes, in the same pass), and
// the cast of current-scaling and tile segments (one launch). Read and Sync
// wait for everything issued before them; Write waits for its own copy. A
// communicator that works on another stream (NCCL) must order itself
// against Stream with events.
//
// The backend is an backend.UpdatePlanner: the optimizer plans a step's
// update and cast once, when it is made, and the backend packs their
// segment tables then. A step writes its factors and seeds into the
// update's host copy and copies the table to the device, asynchronously
// from pinned memory, only when they changed. Direct Update and Cast calls
// find their tables in a cache keyed by the fixed part.
//
// # Overlap without host waits
//
// The backend is an backend.DeviceOrderer: where the optimizer's
// overlapped pipeline waits for a collective of an NCCL communicator (a
// bucket's reduce-scatter before the gradient statistics, a bucket's
// all-gather in WaitParam or before the next update), the compute stream
// waits for the group's completion event and the host does not. In the
// other direction, the communicator of Setup records an event on the
// compute stream at every Start, so a reduce-scatter started by GradReady
// runs after the gradient writes queued on Stream before the call. Write
// the gradients, and read the gathered parameters, on Stream (or order
// your own stream against it with events).
//
// The backend is also an backend.DeviceScaler: with per-tensor current
// scaling and 128x128 tiles, the scales and scale_inv of a step are
// derived from the all-reduced amaxes by a kernel on the compute stream
// (scales.cu), after a device wait for the all-reduce, so the host neither
// waits for nor reads the amaxes. The step's decision (norm, clip, skip,
// loss scaler) is made by a one-thread kernel (stepctl.cu) into the control
// block that the update, scales and cast kernels read, and the backend is
// an backend.AsyncReader (a copy into pinned memory and an event): Step
// waits once to read the decision; StepAsync does not wait at all (with
// delayed scaling the backend is an backend.DelayedScaler: the amax
// histories live on the device, delayed.cu, and the host copies them only
// for a checkpoint or a synchronous Step), except when the previous step's
// decision has not been made yet when it starts
// (cuda.Device.HostSyncs counts the waits; BenchmarkStepAsync reports them
// per step). A StepAsync can therefore be captured in a CUDA graph
// (BeginCapture on the backend's own Stream, which is how it knows, without
// asking the driver; TestStepGraph) once one step has been taken
// uncaptured (a capture may not allocate; the step's segment tables are
// planned with the optimizer). During a capture the backend queries no
// event: the segment tables are copied from capture-only pinned buffers,
// and the NCCL groups and the decision's read-back count as settled for
// the host, since they run at each launch of the graph, on the stream it
// is launched on; LastResult
// after a launch waits for that stream (before the first launch it is an
// error: the block has not been written). The capture must end with
// WaitGathers (or WaitParam of every bucket) after StepAsync: that joins
// the communication stream back into the capture; without it EndCapture
// fails, or a gather issued after the capture waits on an event of it. A
// graph replays what it captured, including the step's learning rate and
// bias corrections (they are in the segment tables): launching it again
// repeats those factors, right for SGD at a constant rate but not for
// Adam, whose bias corrections change every step (moving the factors to
// the device is an open item).
//
// # Choosing a backend
//
// Choose("cpu" | "gpu" | "auto") returns the backend asked for. "gpu" never
// falls back: without a driver or device it returns an error matching
// ErrUnavailable (and cuda's ErrNoDriver or ErrNoDevice). "auto" takes the
// GPU of LOCAL_RANK (0 when unset) when it can and the CPU backend when no
// GPU is present; Name says which.
//
// # A GPU job
//
// Setup (or SetupFromEnv, under the launcher or torchrun) returns one
// rank's wiring: the backend on the GPU of LOCAL_RANK and the NCCL
// communicator on the same device, ordered after the backend's stream.
// optimizer.New refuses a backend and a communicator on different GPUs.
//
// NaN payloads are the one thing the backends do not share: where the CPU
// keeps the payload of a NaN input the GPU returns its canonical NaN
// (0x7fffffff). Steps with non-finite gradients are skipped before the
// update, so a training run never meets the difference.
package gpu
