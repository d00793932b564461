package optimizer

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/internal/invariants"
	"github.com/distopt/distopt/optimizer/backend"
)

// This file holds the segment tables the optimizer hands to its backend:
// built once per bucket (allocBucket), planned once on an UpdatePlanner
// (planSteps), given their factors at each step. See docs/DESIGN.md, Note:
// segment table.

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
	a := &backend.UpdateArgs{Rule: o.cfg.Rule, Control: o.control.buf}
	as := make([]*backend.UpdateArgs, len(o.buckets))
	for i, bk := range o.buckets {
		as[i] = o.fixedArgs(a, bk)
		o.mustSegments(as[i].Segments, as[i].N)
	}
	var err error
	if o.plans.update, err = pl.PlanUpdate(as); err != nil {
		return fmt.Errorf("optimizer: planning the update: %w", err)
	}
	if o.castInUpdate(castStep) {
		return nil
	}
	cs, idx := o.castShards(castStep)
	if len(cs) == 0 {
		return nil
	}
	if o.plans.cast, err = pl.PlanCast(cs); err != nil {
		return fmt.Errorf("optimizer: planning the cast: %w", err)
	}
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
