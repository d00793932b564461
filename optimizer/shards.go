package optimizer

import (
	"errors"
	"fmt"
	"slices"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/invariants"
	"github.com/distopt/distopt/optimizer/backend"
)

// This file holds what the optimizer hands its backend for every bucket's
// shard: the update and cast arguments over the segment tables built once
// per bucket (allocBucket), planned once on an UpdatePlanner (planSteps)
// or packed at each call, and the checks of those tables. See
// docs/DESIGN.md, Note: segment table.

// stepPlans are a step's update and cast over every bucket, prepared by an
// backend.UpdatePlanner (nil: the step packs its arguments each time).
type stepPlans struct {
	update      backend.UpdatePlan
	cast        backend.CastPlan
	castBuckets []int // the bucket of each shard of cast
}

// planSteps makes o.plans when the backend is an UpdatePlanner: the
// backend builds the fixed part of the step's segment tables here, once,
// and each step sends it only the factors and seeds (stepValues).
func (o *Optimizer) planSteps() error {
	pl, ok := o.backend.(backend.UpdatePlanner)
	if !ok || len(o.buckets) == 0 {
		return nil
	}
	if o.cfg.ExternalGradients { // the update reads buffers lent for one step
		return o.planCast(pl)
	}
	a := &backend.UpdateArgs{Rule: o.cfg.Rule, Control: o.control.buf}
	as := make([]*backend.UpdateArgs, len(o.buckets))
	for i, bk := range o.buckets {
		as[i] = o.fixedArgs(a, bk)
		o.mustSegments(as[i].Segments, as[i].N)
	}
	up, err := pl.PlanUpdate(as)
	if err != nil {
		return fmt.Errorf("optimizer: planning the update: %w", err)
	}
	o.plans.update = up
	return o.planCast(pl)
}

// planCast plans the step's cast of the shards the update does not cast.
func (o *Optimizer) planCast(pl backend.UpdatePlanner) error {
	if o.castInUpdate(castStep) {
		return nil
	}
	cs, idx := o.castShards(castStep)
	if len(cs) == 0 {
		return nil
	}
	cp, err := pl.PlanCast(cs)
	if err != nil {
		return fmt.Errorf("optimizer: planning the cast: %w", err)
	}
	o.plans.cast = cp
	o.plans.castBuckets = idx
	return nil
}

// closePlans releases o.plans.
func (o *Optimizer) closePlans() error {
	var err error
	if p := o.plans.update; p != nil {
		err = p.Close()
	}
	if p := o.plans.cast; p != nil {
		err = errors.Join(err, p.Close())
	}
	o.plans = stepPlans{}
	return err
}

// updateAll queues the update of every bucket's shard: a step's through its
// plan (planSteps) where there is one, else with one UpdateShards on a
// ShardUpdater, else bucket by bucket.
func (o *Optimizer) updateAll(a *backend.UpdateArgs, k castKind) error {
	su, ok := o.backend.(backend.ShardUpdater)
	var err error
	switch {
	case k == castStep && o.plans.update != nil:
		err = o.plans.update.Run(o.stepValues(a))
	case ok && len(o.buckets) > 0:
		as := make([]*backend.UpdateArgs, len(o.buckets))
		for i, bk := range o.buckets {
			as[i] = o.updateArgs(a, bk, k)
		}
		err = su.UpdateShards(as)
	default:
		for _, bk := range o.buckets {
			if err := o.updateBucket(a, bk, k); err != nil {
				return err
			}
		}
	}
	if err != nil {
		return o.fail(fmt.Errorf("optimizer: update of %d buckets in one call (shard i is bucket i): %w", len(o.buckets), err))
	}
	return nil
}

// stepValues returns what the planned update takes at this step: a's
// scalars, the factors of every bucket's segments and every bucket's
// moment seed.
func (o *Optimizer) stepValues(a *backend.UpdateArgs) backend.StepValues {
	v := backend.StepValues{Hyper: a.Hyper, Factors: make([][]backend.Factors, len(o.buckets)), Seeds: make([]uint32, len(o.buckets))}
	for i, bk := range o.buckets {
		v.Factors[i] = o.factors(a.Rule, bk)
		v.Seeds[i] = backend.MomentSeed(o.step, bk.idx)
	}
	return v
}

// factors returns rule r's factors of this step for each segment of bk,
// from its parameter's group (zero for RuleNone).
func (o *Optimizer) factors(r backend.Rule, bk *bucket) []backend.Factors {
	fs := make([]backend.Factors, len(bk.segs))
	if r == RuleNone {
		return fs
	}
	for i, pc := range bk.pieces { // segment i is piece i's (allocBucket)
		p := o.params[pc.Param]
		g := o.cfg.Groups[p.Group]
		wd := g.WeightDecay
		if p.NoDecay {
			wd = 0
		}
		fs[i] = r.Factors(o.cfg.ruleParams(), o.step, g.LR.LR(o.step), wd)
	}
	return fs
}

// updateBucket queues the update of bucket bk's shard (the amaxes it folds
// into must have been zeroed).
func (o *Optimizer) updateBucket(a *backend.UpdateArgs, bk *bucket, k castKind) error {
	if err := o.backend.Update(o.updateArgs(a, bk, k)); err != nil {
		return o.fail(fmt.Errorf("optimizer: update of bucket %d: %w", bk.idx, err))
	}
	return nil
}

// updateArgs returns the arguments of the update of bucket bk: a's rule and
// scalars over bk's buffers, with this step's factors and moment seed.
func (o *Optimizer) updateArgs(a *backend.UpdateArgs, bk *bucket, k castKind) *backend.UpdateArgs {
	u := o.fixedArgs(a, bk)
	u.Segments = o.segmentFactors(a.Rule, bk, k)
	u.MomentSeed = backend.MomentSeed(o.step, bk.idx)
	o.mustSegments(u.Segments, u.N)
	return u
}

// fixedArgs returns the arguments of the update of bucket bk that stay the
// same from step to step: a's rule, scalars and control block over bk's
// buffers and segments (zero factors and moment seed).
func (o *Optimizer) fixedArgs(a *backend.UpdateArgs, bk *bucket) *backend.UpdateArgs {
	u := *a
	u.N = bk.b.ShardSize
	u.Master, u.M, u.V = bk.master, bk.m, bk.v
	u.MomentType = o.cfg.uniformMomentType()
	o.momentArgs(&u, bk)
	u.Grad = o.gradShard(bk)
	u.GradType = o.cfg.GradType
	u.Segments = bk.segs
	u.Recipe = o.cfg.Recipe
	u.Amax, u.Scale = o.amax, o.scale
	if bk.b.HighPrecision {
		hsz := o.cfg.HighPrecisionType.Size()
		u.HP = bk.data.Slice(hsz*bk.lo, hsz*bk.hi)
		u.HPType = o.cfg.HighPrecisionType
	} else {
		u.FP8 = o.fp8Shard(bk)
		u.BlockScales = o.blockScaleShard(bk)
	}
	return &u
}

// segmentFactors returns bk's segment table with rule r's factors of this
// step and, for the first cast of delayed scaling, the delayed segments
// turned to current scaling (the first cast seeds the histories from the
// masters' own amax).
func (o *Optimizer) segmentFactors(r backend.Rule, bk *bucket, k castKind) []backend.Segment {
	segs := slices.Clone(bk.segs)
	for i, f := range o.factors(r, bk) {
		segs[i].Factors = f
	}
	return o.firstCastModes(segs, k)
}

// firstCastModes turns the delayed segments of segs to current scaling for
// the first cast (in place), and returns segs.
func (o *Optimizer) firstCastModes(segs []backend.Segment, k castKind) []backend.Segment {
	if k != castFirst {
		return segs
	}
	for i := range segs {
		if segs[i].Mode == backend.ModeTensorDelayed {
			segs[i].Mode = backend.ModeTensorCurrent
		}
	}
	return segs
}

// castAll queues the cast of kind k of every FP8 bucket's shard (nothing
// when the update casts them): a step's through its plan (planSteps) where
// there is one, else one CastShards on a ShardUpdater, else one Cast per
// bucket.
func (o *Optimizer) castAll(k castKind) error {
	if o.castInUpdate(k) {
		return nil
	}
	if k == castStep && o.plans.cast != nil {
		return o.castShardsErr(o.plans.cast.Run(), o.plans.castBuckets)
	}
	su, ok := o.backend.(backend.ShardUpdater)
	if !ok {
		for _, bk := range o.buckets {
			if err := o.castBucket(bk, k); err != nil {
				return err
			}
		}
		return nil
	}
	cs, idx := o.castShards(k)
	if len(cs) == 0 {
		return nil
	}
	return o.castShardsErr(su.CastShards(cs), idx)
}

// castShards returns the arguments of the cast of kind k of every FP8
// bucket's shard and the indices of those buckets.
func (o *Optimizer) castShards(k castKind) ([]*backend.CastArgs, []int) {
	var cs []*backend.CastArgs
	var idx []int
	for _, bk := range o.buckets {
		if c := o.castArgs(bk, k); c != nil {
			cs, idx = append(cs, c), append(idx, bk.idx)
		}
	}
	return cs, idx
}

// castShardsErr marks the optimizer broken by err, the error of the cast
// of buckets idx in one call, and returns it wrapped (nil for nil).
func (o *Optimizer) castShardsErr(err error, idx []int) error {
	if err == nil {
		return nil
	}
	return o.fail(fmt.Errorf("optimizer: cast of buckets %v in one call (shard i is the i-th of them): %w", idx, err))
}

// castBucket queues the cast of bucket bk's shard with the scales of the
// last amax reduction (nothing for a high-precision bucket).
func (o *Optimizer) castBucket(bk *bucket, k castKind) error {
	c := o.castArgs(bk, k)
	if c == nil {
		return nil
	}
	if err := o.backend.Cast(c); err != nil {
		return o.fail(fmt.Errorf("optimizer: cast of bucket %d: %w", bk.idx, err))
	}
	return nil
}

// castArgs returns the arguments of the cast of bucket bk's shard (nil for
// a high-precision bucket).
func (o *Optimizer) castArgs(bk *bucket, k castKind) *backend.CastArgs {
	if bk.b.HighPrecision {
		return nil
	}
	c := &backend.CastArgs{N: bk.b.ShardSize, Master: bk.master, Segments: bk.segs, Format: o.cfg.Recipe.Format, FP8: o.fp8Shard(bk), Scale: o.scale}
	if k == castStep {
		c.Control = o.control.buf
	}
	if k == castFirst && o.cfg.Recipe.ScaleSource() == fp8.FromHistory {
		c.Segments = o.firstCastModes(append([]backend.Segment(nil), bk.segs...), k)
	}
	o.mustSegments(c.Segments, c.N)
	return c
}

// checkInvariants turns on the checks of the segment tables the optimizer
// hands to its backend: always in this package's tests, and in builds with
// the tag invariants.
var checkInvariants = invariants.Enabled

// mustSegments panics when checks are on and segs is not a valid table of
// a shard of n elements under the optimizer's recipe.
func (o *Optimizer) mustSegments(segs []backend.Segment, n int) {
	if !checkInvariants {
		return
	}
	_, block := o.cfg.Recipe.Block()
	if err := backend.CheckSegments(segs, n, block); err != nil {
		panic(err)
	}
}
