package optimizer

import (
	"context"
	"fmt"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// This file holds the step: Step as the six phases of the package
// documentation, each a method of its own that works bucket by bucket, and
// refresh, the cast and gather without an update (New, LoadPieces).

// refresh recomputes every parameter's FP8 (or high-precision) copy from the
// masters as they are and gathers it: the first cast (castFirst), and the
// recast after a checkpoint load (castReload). Delayed-scaling histories
// receive the amax of the first cast.
func (o *Optimizer) refresh(ctx context.Context, k castKind) error {
	var t Timings
	a := &backend.UpdateArgs{Rule: RuleNone}
	if err := o.update(a, k, &t); err != nil {
		return err
	}
	if err := o.reduceAmax(ctx, k, &t); err != nil {
		return err
	}
	if err := o.cast(k, &t); err != nil {
		return err
	}
	if err := o.gather(ctx, &t); err != nil {
		return err
	}
	if err := o.flushControl(); err != nil { // the host waited already: write now, not in a step
		return err
	}
	return o.pushHistories()
}

// Step reduces the gradients, checks them, updates the masters, casts them
// to FP8 and gathers the parameters. All ranks must call it together. After
// it the gradient buffers hold unspecified values: write every gradient (or
// call ZeroGrad) before the next step. A rank that wrote none (no Grad,
// SetGrad, GradReady or ZeroGrad call since its last Step) steps with zero
// gradients: Step zeroes its buffers for it.
//
// The six phases are those of the package documentation, one call each.
// When the gradients were declared ready (GradReady), their reduce-scatters
// are already in flight and phase 1 only waits for them; StepAsync is Step
// without the wait for the gathers. With Config.ShardedGradients every
// parameter must have been declared ready MicroBatches times (see the
// package documentation).
func (o *Optimizer) Step(ctx context.Context) (StepResult, error) {
	return o.stepWith(ctx, false)
}

// stepWith is Step, or StepAsync when async: phase 6 then starts the
// gathers and returns.
func (o *Optimizer) stepWith(ctx context.Context, async bool) (StepResult, error) {
	defer o.unbind() // lent gradients are lent for this step only, whatever its outcome
	if err := o.usable(); err != nil {
		return StepResult{}, err
	}
	if err := o.resolve(); err != nil { // the last StepAsync's decision
		return StepResult{}, err
	}
	if err := o.cfg.checkLRs(o.step + 1); err != nil { // with the step count exact
		return StepResult{}, err
	}
	if err := o.needGrads("Step", ""); err != nil {
		return StepResult{}, err
	}
	if err := o.waitAllGathers(ctx); err != nil { // StepAsync's, not waited for
		return StepResult{}, err
	}
	if err := o.zeroUnwritten(); err != nil {
		return StepResult{}, err
	}
	deferred := o.deferred(async)
	var res StepResult
	err := o.batched(deferred, func() error { // no host wait for the device: one hand-over (Batcher)
		var err error
		res, err = o.stepPhases(ctx, async, deferred)
		return err
	})
	o.control.last = res
	return res, err
}

// stepPhases runs the six phases of a step (see stepWith); deferred: the
// step leaves its decision on the device.
func (o *Optimizer) stepPhases(ctx context.Context, async, deferred bool) (StepResult, error) {
	res := StepResult{LossScale: o.LossScale(), ClipCoef: 1}
	t := &res.Timings
	reduce := o.reduceGrads
	switch {
	case o.pool != nil:
		reduce = o.reducePooled
	case o.pipe.any:
		reduce = o.reduceReady
	}
	if err := reduce(ctx, t); err != nil { // 1
		return res, err
	}
	err := o.checkGrads(ctx, &res, deferred) // 2
	if err == nil && !deferred {
		err = o.releaseDeviceWaited(ctx) // checkGrads synchronised with the device
	}
	if err != nil || res.Skipped {
		return res, err
	}
	a := o.stepScalars(res.ClipCoef / res.LossScale) // deferred: the kernels read the gradient scale from the block
	a.Control = o.control.buf
	if err := o.update(a, castStep, t); err != nil { // 3
		return res, err
	}
	if err := o.reduceAmax(ctx, castStep, t); err != nil { // 4
		return res, err
	}
	if deferred { // before the gathers start: their issue would delay the copy's
		if err := o.readLater(); err != nil {
			return res, err
		}
	}
	if err := o.castGather(t); err != nil { // 5, and 6 started bucket by bucket
		return res, err
	}
	if async {
		return res, nil // the gathers in flight, waited for by WaitParam
	}
	return res, o.waitStepGathers(ctx, t) // 6
}

// gradShard returns this rank's shard of bk's gradient buffer (with sharded
// gradients, the shard buffer; nil with external gradients none bound, as
// in a refresh, whose update reads none).
func (o *Optimizer) gradShard(bk *bucket) buffer.Buffer {
	if bk.acc != nil {
		return bk.acc
	}
	if bk.grad == nil {
		return nil
	}
	gsz := o.cfg.GradType.Size()
	return bk.grad.Slice(gsz*bk.lo, gsz*bk.hi)
}

// reduceGrads reduce-scatters (averages) every bucket of gradients in place,
// as one group (phase 1).
func (o *Optimizer) reduceGrads(ctx context.Context, t *Timings) error {
	t0 := time.Now()
	ops := make([]collective.Op, len(o.buckets))
	for i, bk := range o.buckets {
		ops[i] = o.reduceOp(bk)
	}
	if err := o.comm.Start(ops...).Wait(ctx); err != nil {
		return o.fail(fmt.Errorf("optimizer: gradient reduce-scatter: %w", err))
	}
	t.ReduceScatter = since(&t0)
	return nil
}

// checkGrads is phase 2: the non-finite check and the global norm, with ONE
// small all-reduce, and the step's decision from them in the control block
// (decide): norm, clip coefficient, skip, step count, loss scaler. Unless
// deferred it fills res from the block.
func (o *Optimizer) checkGrads(ctx context.Context, res *StepResult, deferred bool) error {
	t0 := time.Now()
	if err := o.backend.Zero(o.stats, 0, 8*backend.StatsLen); err != nil {
		return o.fail(err)
	}
	if err := o.addGradStats(); err != nil {
		return o.fail(err)
	}
	op := collective.Op{Kind: collective.OpAllReduce, Dst: o.stats, Src: o.stats, DType: buffer.Int64, Reduce: collective.Sum}
	if err := o.pipe.after(ctx, o.comm.Start(op)); err != nil {
		return o.fail(fmt.Errorf("optimizer: gradient norm all-reduce: %w", err))
	}
	if err := o.decide(res, deferred); err != nil {
		return err
	}
	res.Timings.Norm = since(&t0)
	return nil
}

// stepScalars returns the update arguments of step o.step before their
// buffers: the rule and its per-step scalars.
func (o *Optimizer) stepScalars(gradScale float64) *backend.UpdateArgs {
	return &backend.UpdateArgs{Rule: o.cfg.Rule, Hyper: o.cfg.Rule.Hyper(o.cfg.ruleParams(), o.step, gradScale)}
}

// ruleParams returns the hyperparameters of the update rules in c.
func (c *Config) ruleParams() backend.Params {
	return backend.Params{Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, Momentum: c.Momentum}
}

// update is phase 3: the rule's update of every bucket's shard (nothing
// with RuleNone), fused with what the recipe needs: the amax of the new
// master, or the cast itself where the scale is already known.
func (o *Optimizer) update(a *backend.UpdateArgs, k castKind, t *Timings) error {
	t0 := time.Now()
	if o.nSlots > 0 {
		if err := o.backend.Zero(o.amax, 0, 4*o.nSlots); err != nil {
			return o.fail(err)
		}
	}
	if err := o.updateAll(a, k); err != nil {
		return err
	}
	t.Update = since(&t0)
	return nil
}

// fp8Shard returns this rank's shard of bk's FP8 data.
func (o *Optimizer) fp8Shard(bk *bucket) buffer.Buffer {
	r := o.cfg.Recipe
	return bk.data.Slice(r.DataBytes(bk.lo), r.DataBytes(bk.hi))
}

// blockScaleShard returns this rank's shard of bk's block scales (nil
// without block scales).
func (o *Optimizer) blockScaleShard(bk *bucket) buffer.Buffer {
	if bk.blocks == nil {
		return nil
	}
	r := o.cfg.Recipe
	return bk.blocks.Slice(r.BlockScaleBytes(bk.lo), r.BlockScaleBytes(bk.hi))
}

// reduceAmax is phase 4: ONE packed all-reduce (MAX) of every amax of the
// step, from which the scale state derives the scales on every rank alike;
// the scales of the next cast and the scale_inv of the views are written
// back.
func (o *Optimizer) reduceAmax(ctx context.Context, k castKind, t *Timings) error {
	t0 := time.Now()
	defer func() { t.AmaxReduce = since(&t0) }()
	if o.nSlots == 0 {
		return nil
	}
	op := collective.Op{Kind: collective.OpAllReduce, Dst: o.amax, Src: o.amax, DType: buffer.Uint32, Reduce: collective.Max}
	if ds, ok := o.backend.(backend.DeviceScaler); ok && o.cfg.Recipe.ScaleSource() != fp8.FromHistory {
		var block buffer.Buffer // a refresh has no control block
		if k == castStep {
			block = o.control.buf
		}
		return o.scalesOnDevice(ctx, ds, op, block)
	}
	if k == castStep && o.deviceHist != nil {
		// Delayed scaling on a DelayedScaler backend, in Step as in
		// StepAsync: the host reading the amaxes back and writing the
		// scales left the device idle for that round trip.
		return o.delayedOnDevice(ctx, op)
	}
	if err := o.pullHistories(); err != nil { // the host's state, from the device's steps
		return err
	}
	if o.deviceHist != nil {
		o.deviceHist.devStale = true // advanced by the host below
	}
	if err := o.comm.Start(op).Wait(ctx); err != nil {
		return o.fail(fmt.Errorf("optimizer: amax all-reduce: %w", err))
	}
	raw := make([]byte, 4*o.nSlots)
	if err := o.backend.Read(raw, o.amax, 0); err != nil {
		return o.fail(err)
	}
	o.scales.reduced(k, bytesFloat32(raw))
	if err := o.backend.Write(o.scale, 0, float32Bytes(o.scales.Scale)); err != nil {
		return o.fail(err)
	}
	if err := o.backend.Write(o.scaleIn, 0, float32Bytes(o.scales.Inv)); err != nil {
		return o.fail(err)
	}
	return nil
}

// scalesOnDevice is phase 4 on a DeviceScaler backend, for the recipes
// whose scales depend on the reduced amax alone: current scaling and
// tiles. The backend derives scales and scale_inv in its own queue, so the
// host reads no amax. block is a step's control block, whose skip flag the
// backend honours; a refresh passes nil.
func (o *Optimizer) scalesOnDevice(ctx context.Context, ds backend.DeviceScaler, op collective.Op, block buffer.Buffer) error {
	if err := o.pipe.after(ctx, o.comm.Start(op)); err != nil {
		return o.fail(fmt.Errorf("optimizer: amax all-reduce: %w", err))
	}
	if err := ds.ScalesFromAmax(o.scale, o.scaleIn, o.amax, block, o.nSlots, o.cfg.Recipe); err != nil {
		return o.fail(fmt.Errorf("optimizer: scales from the reduced amaxes: %w", err))
	}
	return nil
}

// cast is phase 5: the cast of the segments whose scale the amax reduction
// gave (current scaling, tiles, the first cast of delayed scaling); the
// other recipes cast in the update's own pass.
func (o *Optimizer) cast(k castKind, t *Timings) error {
	t0 := time.Now()
	defer func() { t.Cast = since(&t0) }()
	return o.castAll(k)
}

// castInUpdate reports whether a cast of kind k happens in the update's own
// pass (blocks, and delayed scaling after the first cast), leaving phase 5
// nothing to cast.
func (o *Optimizer) castInUpdate(k castKind) bool {
	mode := recipeMode(o.cfg.Recipe)
	return mode == backend.ModeBlock || (mode == backend.ModeTensorDelayed && o.scales.delayed(k))
}

// castGather is phase 5 of a step with the start of phase 6 folded in: on
// a ShardUpdater or with a planned cast, one cast of every shard (unless
// the update cast them),
// then each bucket's all-gather, started with one call
// (collective.StartEach); on other backends, bucket by bucket, the
// cast of its shard is queued and its all-gather started at once, so that
// on a device the gather of bucket b runs while bucket b+1 is cast (a
// communicator orders each collective after the work queued before its
// Start). The gathers are
// left in flight in the pipeline: StepAsync returns with them, Step waits
// (waitStepGathers). Timings.Cast is the host time to queue both.
func (o *Optimizer) castGather(t *Timings) error {
	t0 := time.Now()
	defer func() { t.Cast = since(&t0) }()
	if _, shards := o.backend.(backend.ShardUpdater); shards || o.plans.cast != nil || o.castInUpdate(castStep) {
		if err := o.castAll(castStep); err != nil { // one cast (or none), then every gather with one call
			return err
		}
		groups := make([][]collective.Op, len(o.buckets))
		for b, bk := range o.buckets {
			groups[b] = o.gatherOps(bk)
		}
		o.pipe.startParamSync(groups)
		return nil
	}
	for b, bk := range o.buckets {
		if err := o.castBucket(bk, castStep); err != nil {
			return err
		}
		o.pipe.startBucketParamSync(b, o.gatherOps(bk))
	}
	return nil
}

// waitStepGathers is the rest of phase 6 in Step: it waits for the
// all-gathers castGather started, in bucket order, then for the backend.
func (o *Optimizer) waitStepGathers(ctx context.Context, t *Timings) error {
	t0 := time.Now()
	if b, err := o.pipe.waitParamSync(ctx); err != nil {
		return o.fail(fmt.Errorf("optimizer: parameter all-gather of bucket %d: %w", b, err))
	}
	if err := o.backend.Sync(); err != nil {
		return o.fail(err)
	}
	t.AllGather = since(&t0)
	return nil
}

// gather is phase 6: the all-gather of every bucket in place (and of its
// block scales), as one group, then a wait for the backend.
func (o *Optimizer) gather(ctx context.Context, t *Timings) error {
	t0 := time.Now()
	var ops []collective.Op
	for _, bk := range o.buckets {
		ops = append(ops, o.gatherOps(bk)...)
	}
	if err := o.comm.Start(ops...).Wait(ctx); err != nil {
		return o.fail(fmt.Errorf("optimizer: parameter all-gather: %w", err))
	}
	if err := o.backend.Sync(); err != nil {
		return o.fail(err)
	}
	t.AllGather = since(&t0)
	return nil
}

// gatherOps returns the all-gathers of bucket bk: its data, and its block
// scales when it has them.
func (o *Optimizer) gatherOps(bk *bucket) []collective.Op {
	var src buffer.Buffer
	if bk.b.HighPrecision {
		hsz := o.cfg.HighPrecisionType.Size()
		src = bk.data.Slice(hsz*bk.lo, hsz*bk.hi)
	} else {
		src = o.fp8Shard(bk)
	}
	ops := []collective.Op{{Kind: collective.OpAllGather, Dst: bk.data, Src: src}}
	if bk.blocks != nil {
		ops = append(ops, collective.Op{Kind: collective.OpAllGather, Dst: bk.blocks, Src: o.blockScaleShard(bk)})
	}
	return ops
}
