package backend

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
)

// This file lists every optional capability of a Backend. The optimizer
// asks for each with a type assertion and falls back to the plain Backend
// methods without it. The GPU backend has them all; the CPU backend has
// ShardUpdater, UpdatePlanner and GradAccumulator.

// ShardUpdater runs the update, and the cast, of several bucket shards with
// one call: one kernel launch over every bucket's segments, as
// multi-tensor-apply does. Without it the optimizer calls Update and Cast
// once per bucket.
//
// A wrapper that embeds a ShardUpdater and overrides Update or Cast is
// bypassed by the promoted UpdateShards and CastShards. Override those too,
// or embed the Backend interface, which hides every optional capability.
type ShardUpdater interface {
	// UpdateShards does what Update(as[i]) for every i in turn does, to the
	// bit. The arguments differ only where CheckShards allows.
	UpdateShards(as []*UpdateArgs) error
	// CastShards does what Cast(cs[i]) for every i in turn does. The
	// arguments differ only where CheckCastShards allows.
	CastShards(cs []*CastArgs) error
}

// UpdatePlanner prepares, once, the update and the cast of a fixed list of
// bucket shards. The fixed part of their segment tables (offsets, modes,
// slots, buffers) is built when the plan is made; each step then sends
// only what changes (StepValues). Without it the optimizer packs each
// shard's arguments at every step for UpdateShards (or Update) and
// CastShards (or Cast). See docs/DESIGN.md, Note: segment table.
//
// Like ShardUpdater, a wrapper that embeds an UpdatePlanner and overrides
// Update or Cast is bypassed by the promoted plans.
type UpdatePlanner interface {
	// PlanUpdate returns a plan of the update of the shards as, which
	// CheckShards must accept. Their Hyper, Factors and MomentSeed are
	// not read: each Run passes them. The buffers must outlive the plan.
	PlanUpdate(as []*UpdateArgs) (UpdatePlan, error)
	// PlanCast returns a plan of the cast of the shards cs, which
	// CheckCastShards must accept. The buffers must outlive the plan.
	PlanCast(cs []*CastArgs) (CastPlan, error)
}

// UpdatePlan is an update prepared by an UpdatePlanner. A plan runs from
// one goroutine at a time.
type UpdatePlan interface {
	// Run does what Update does for each shard of v.Apply(as) in turn,
	// where as are the planned shards. It is queued, as Update is.
	Run(v StepValues) error
	// Close releases the plan; it must not run afterwards.
	Close() error
}

// CastPlan is a cast prepared by an UpdatePlanner. A plan runs from one
// goroutine at a time.
type CastPlan interface {
	// Run does what Cast(c) does for every planned shard c in turn. It
	// is queued, as Cast is.
	Run() error
	// Close releases the plan; it must not run afterwards.
	Close() error
}

// GradAccumulator adds one gradient shard into another. Sharded gradients
// with more than one micro-batch need it. AccumulateGrad sets dst[i] to
// src[i] + dst[i] for i < n, computed in float32 and rounded to dt as
// collective.Reduce (Sum) does.
type GradAccumulator interface {
	AccumulateGrad(dst, src buffer.Buffer, dt buffer.DType, n int) error
}

// GradStatsPlanner prepares, once, the statistics of a fixed list of
// gradient buffers, so that each step adds them with one launch and no
// host work per buffer. Without it the optimizer calls GradStats once per
// bucket.
type GradStatsPlanner interface {
	// PlanGradStats returns a plan whose Run adds to stats exactly what
	// GradStats(stats, grads[i], gt, ns[i]) for every i in turn adds. stats
	// and the buffers must outlive the plan.
	PlanGradStats(stats buffer.Buffer, grads []buffer.Buffer, gt buffer.DType, ns []int) (GradStatsPlan, error)
}

// GradStatsPlan is a statistics pass prepared by a GradStatsPlanner.
type GradStatsPlan interface {
	// Run adds the planned statistics to the plan's stats. It is queued,
	// as GradStats is.
	Run() error
	// Close releases the plan; it must not run afterwards.
	Close() error
}

// DeviceOrderer runs its work in order on a device queue. After makes the
// work queued from now on wait, on the device, for the collective work w,
// without a host wait. It reports false for work it cannot order after (a
// host communicator's); the optimizer then waits for w on the host.
//
// The optimizer calls After for the works of one phase newest first, so
// that a backend whose works complete in order can make one device wait.
type DeviceOrderer interface {
	After(w collective.Work) (bool, error)
}

// DeviceScaler derives scales from the reduced amaxes in its own queue, so
// the host never reads the amaxes back. For i < n, ScalesFromAmax sets
// scale[i] and scaleInv[i] (float32) to fp8.ScaleFromAmax(amax[i],
// r.Format, r.Margin, r.PowerOf2) and its inverse; amax holds float32 bits
// and its sign is ignored. When ctl, a step's control block, has its skip
// flag set, nothing is written; ctl is nil outside a step. The optimizer
// uses it for per-tensor current scaling and 128x128 tiles.
type DeviceScaler interface {
	ScalesFromAmax(scale, scaleInv, amax, ctl buffer.Buffer, n int, r fp8.Recipe) error
}

// DelayedScaler keeps delayed scaling's amax histories in its own memory
// and derives the next cast's scales there. For i < n, unless ctl has its
// skip flag set, DelayedScales does what the host does after a step:
//   - cast[i] = scale[i] and scaleInv[i] = 1/scale[i];
//   - row i of hist (l float32 values, oldest first) drops its oldest value
//     and appends amax[i] (float32 bits of the reduced amax);
//   - scale[i] = fp8.ScaleFromAmax of the row reduced by r.HistoryReduce,
//     with r.Format, r.Margin and r.PowerOf2.
type DelayedScaler interface {
	DelayedScales(scale, scaleInv, cast, hist, amax, ctl buffer.Buffer, n, l int, r fp8.Recipe) error
}

// AsyncReader reads its memory back to the host without waiting for its
// queue: a copy into pinned host memory and an event. With it, StepAsync
// leaves the step's decision on the device and learns it later. The
// update, scales and cast read the skip flag of the control block, so a
// skipped step writes nothing.
type AsyncReader interface {
	// ReadLater queues a copy of the first n bytes of src, ordered after
	// the work queued so far. The handle is valid until the next ReadLater.
	ReadLater(src buffer.Buffer, n int) (PendingRead, error)
}

// PendingRead is a copy queued by ReadLater.
type PendingRead interface {
	// Done reports whether the copy has landed, without waiting.
	Done() (bool, error)
	// Bytes waits for the copy and returns its bytes. The caller must not
	// keep them past the next ReadLater.
	Bytes() ([]byte, error)
}

// Batcher runs many calls for the cost of one hand-over. Every call into
// the CUDA driver runs on the device's own OS thread, so each call costs a
// hand-over. Batch runs fn, which calls the backend and the communicator,
// on that thread. fn may wait for collective work, so the communicator must
// make progress without the backend's thread.
type Batcher interface {
	Batch(fn func() error) error
}

// OnDevice is implemented by backends and communicators bound to one GPU.
// Ordinal is the GPU's. The optimizer refuses a backend and a communicator
// on two different GPUs.
type OnDevice interface {
	Ordinal() int
}
