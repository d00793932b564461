package backendtest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// Shards checks UpdateShards and CastShards of a backend.ShardUpdater against
// the reference's Update and Cast, called shard by shard; other backends
// skip. A launch takes two to four shards of one recipe case. Each has its
// own layout, buffers, moment seed and bucket position; they share the
// launch's scalars, amaxes and scales. Mixed cases put their high-precision
// segments in shards of their own, as the optimizer's buckets do. Every case
// runs with each rule and moment type, and with no step control block, one,
// or one that skips the step and writes nothing. Then the FP8 shards' new
// masters are cast. Unaligned cases reach the kernels' scalar heads and
// tails, as the comment on them in the code says.
func Shards(t *testing.T, be backend.Backend) {
	su, ok := be.(backend.ShardUpdater)
	if !ok {
		t.Skipf("%s is not an backend.ShardUpdater", be.Name())
	}
	eachLaunch(t, be, func(t *testing.T, p *pair, _ *rand.Rand, l *launch) {
		for _, a := range l.args(0) {
			must(t, p.ref.Update(a))
		}
		must(t, su.UpdateShards(l.args(1)))
		l.check(p)
		if cs := l.casts(0); len(cs) > 0 {
			for _, c := range cs {
				must(t, p.ref.Cast(c))
			}
			must(t, su.CastShards(l.casts(1)))
			l.check(p)
		}
	})
}

// Plans checks the plans of a backend that is an backend.UpdatePlanner
// (it skips otherwise) on the launches of Shards: an update and a cast
// planned once, then run for three steps, each against the reference's
// Update of every shard of StepValues.Apply and its Cast. The steps draw
// new scalars, factors and seeds, except the second, which keeps the
// first's factors (a constant learning rate).
func Plans(t *testing.T, be backend.Backend) {
	pl, ok := be.(backend.UpdatePlanner)
	if !ok {
		t.Skipf("%s is not an backend.UpdatePlanner", be.Name())
	}
	eachLaunch(t, be, func(t *testing.T, p *pair, r *rand.Rand, l *launch) {
		up, err := pl.PlanUpdate(l.args(1))
		must(t, err)
		defer func() { must(t, up.Close()) }()
		var cp backend.CastPlan
		if cs := l.casts(1); len(cs) > 0 {
			cp, err = pl.PlanCast(cs)
			must(t, err)
			defer func() { must(t, cp.Close()) }()
		}
		var v backend.StepValues
		for step := range 3 {
			v = stepValues(r, l.args(0), v, step == 1)
			as, err := v.Apply(l.args(0))
			must(t, err)
			for _, a := range as {
				must(t, p.ref.Update(a))
			}
			must(t, up.Run(v))
			l.check(p)
			if cp != nil {
				for _, c := range l.casts(0) {
					must(t, p.ref.Cast(c))
				}
				must(t, cp.Run())
				l.check(p)
			}
		}
	})
}

// stepValues returns a step's values for the shards as: the scalars of
// as[0] with a new gradient scale and bias correction, new seeds, and new
// factors for every segment, or last's when same.
func stepValues(r *rand.Rand, as []*backend.UpdateArgs, last backend.StepValues, same bool) backend.StepValues {
	v := backend.StepValues{Hyper: as[0].Hyper, Factors: last.Factors, Seeds: make([]uint32, len(as))}
	v.Hyper.GradScale = float32(0.5 + r.Float64())
	v.Hyper.SqrtVCorrection = float32(1 + r.Float64())
	for i := range v.Seeds {
		v.Seeds[i] = r.Uint32()
	}
	if same {
		return v
	}
	v.Factors = make([][]backend.Factors, len(as))
	for i, a := range as {
		for range a.Segments {
			v.Factors[i] = append(v.Factors[i], backend.Factors{StepSize: float32(1e-4 + r.Float64()*1e-2),
				Shrink: float32(1 - r.Float64()*1e-3), WeightDecay: float32(r.Float64() * 0.01)})
		}
	}
	return v
}

// launch is one case of Shards and Plans: the shards of one launch, their
// update and cast arguments on either side (0: the reference, 1: the
// backend under test), and the buffers to compare.
type launch struct {
	args    func(side int) []*backend.UpdateArgs
	casts   func(side int) []*backend.CastArgs // nil: nothing to cast
	checked []buf
	skip    bool // the control block skips the step
}

// check compares the buffers of l on both sides, and when the step is
// skipped checks that none was written.
func (l *launch) check(p *pair) {
	p.check(l.checked...)
	if l.skip {
		p.untouched(l.checked...)
	}
}

// eachLaunch runs check on a launch of every case of Shards, each in a
// subtest with its own pair and random source.
func eachLaunch(t *testing.T, be backend.Backend, check func(t *testing.T, p *pair, r *rand.Rand, l *launch)) {
	type rule struct {
		r    backend.Rule
		m, v backend.MomentDType
		gt   buffer.DType
	}
	F32, BF16, FP8 := backend.MomentFloat32, backend.MomentBFloat16, backend.MomentFP8
	rules := []rule{
		{backend.RuleAdamW, F32, F32, buffer.BFloat16},
		{backend.RuleAdamW, BF16, BF16, buffer.Float32},
		{backend.RuleAdamW, FP8, BF16, buffer.BFloat16},
		{backend.RuleAdamW, FP8, FP8, buffer.BFloat16},
		{backend.RuleSGD, F32, 0, buffer.BFloat16},
		{backend.RuleSGD, FP8, 0, buffer.Float32},
		{backend.RuleNone, F32, F32, buffer.Float32},
	}
	// The unaligned cases place every shard but the first at an element
	// offset that is not a multiple of 4 in its buffers, and segments
	// anywhere, at odd offsets and lengths. One launch then takes some
	// shards by vector accesses and others element by element, and segments
	// start and end mid-vector: the kernels' scalar heads and tails. Their
	// moments are not in FP8. FP8 segments start on block boundaries, and
	// their launches, update.cu's _q kernels, take buffers 16-byte aligned.
	unaligned := []rule{
		{backend.RuleAdamW, F32, F32, buffer.BFloat16},
		{backend.RuleAdamW, BF16, BF16, buffer.Float32},
		{backend.RuleSGD, BF16, 0, buffer.Float32},
		{backend.RuleNone, F32, F32, buffer.Float32},
	}
	for ci, rc := range recipeCases() {
		for ri, ru := range rules {
			name := fmt.Sprintf("%s/%v/m=%v/v=%v/g=%v", rc.name, ru.r, ru.m, ru.v, ru.gt)
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(ci), uint64(ri)+1000))
				p := newPair(t, be)
				check(t, p, r, newLaunch(p, r, rc, ru.r, ru.m, ru.v, ru.gt, false))
			})
		}
		for ri, ru := range unaligned {
			name := fmt.Sprintf("unaligned/%s/%v/m=%v/v=%v/g=%v", rc.name, ru.r, ru.m, ru.v, ru.gt)
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(ci), uint64(ri)+2000))
				p := newPair(t, be)
				check(t, p, r, newLaunch(p, r, rc, ru.r, ru.m, ru.v, ru.gt, true))
			})
		}
	}
}

// newLaunch uploads the shards of one case of Shards, unaligned or not.
func newLaunch(p *pair, r *rand.Rand, rc recipeCase, rule backend.Rule, mt, vt backend.MomentDType, gt buffer.DType, unaligned bool) *launch {
	mb := backend.MomentBlocks[r.IntN(len(backend.MomentBlocks))]
	k := 2 + r.IntN(3)
	var shards []updateShard
	var fp8Shard []bool
	for i := range k {
		sc := shardCase(rc, i)
		at := placement{align: mb}
		if unaligned {
			at = placement{align: 1, lead: i % 4} // shard 0 aligned, the others 1, 2, 3 elements off
		}
		sh := newMomentShard(p, r, sc, rule, mt, vt, mb, gt, i%2 == 1, at)
		shards = append(shards, sh)
		fp8Shard = append(fp8Shard, sc.hp == 0)
	}
	// one launch's amaxes, scales and scalars: the largest shard's slots
	amax, scale := randomSlots(r, launchSlots(shards))
	ab := p.upload("launch amax", u32s(amax), amaxKeys)
	sb := p.upload("launch scale", encode(scale, buffer.Float32), bytesExact)
	hyper := shards[0].args(0).Hyper
	ctl := controlCase(r.IntN(3)) // none, its gradient scale, a skipped step
	var cb *buf
	if ctl != noControl {
		c := p.upload("control", controlBlock(r, ctl), bytesExact)
		cb = &c
	}
	pick := func(x *buf, side int) buffer.Buffer {
		if x == nil {
			return nil
		}
		return []buffer.Buffer{x.ref, x.be}[side]
	}
	l := &launch{checked: []buf{ab, sb}, skip: ctl == skipControl}
	for _, sh := range shards {
		l.checked = append(l.checked, sh.bufs...)
	}
	l.args = func(side int) []*backend.UpdateArgs {
		as := make([]*backend.UpdateArgs, k)
		for i, sh := range shards {
			a := sh.args(side)
			a.Amax, a.Scale, a.Hyper, a.Control = pick(&ab, side), pick(&sb, side), hyper, pick(cb, side)
			if !fp8Shard[i] {
				a.FP8, a.BlockScales = nil, nil // a high-precision bucket has no FP8 bytes
			}
			as[i] = a
		}
		return as
	}
	if rc.recipe.Format == 0 {
		l.casts = func(int) []*backend.CastArgs { return nil } // nothing to cast
		return l
	}
	l.casts = func(side int) []*backend.CastArgs {
		var cs []*backend.CastArgs
		for i, a := range l.args(side) {
			if fp8Shard[i] {
				cs = append(cs, &backend.CastArgs{N: a.N, Master: a.Master, Segments: a.Segments, Format: rc.recipe.Format, FP8: a.FP8, Scale: a.Scale, Control: a.Control})
			}
		}
		return cs
	}
	return l
}

// launchSlots returns the number of amax and scale slots that the
// segments of every shard use, at least 1.
func launchSlots(shards []updateShard) int {
	slots := 1
	for _, sh := range shards {
		for _, s := range sh.args(0).Segments {
			slots = max(slots, s.Slot+1+tileSlots(s))
		}
	}
	return slots
}

// shardCase returns the recipe case of shard i of a Shards case of rc: in
// a mixed case, odd shards hold rc's high-precision segments and even ones
// the others; other cases unchanged.
func shardCase(rc recipeCase, i int) recipeCase {
	if len(rc.modes) < 2 || !slices.Contains(rc.modes, backend.ModeHighPrecision) {
		return rc
	}
	sc := rc
	if i%2 == 1 {
		sc.modes = []backend.Mode{backend.ModeHighPrecision}
		return sc
	}
	sc.modes = slices.DeleteFunc(slices.Clone(rc.modes), func(m backend.Mode) bool { return m == backend.ModeHighPrecision })
	sc.hp = 0
	return sc
}

// tileSlots is the number of slots after s.Slot a tile segment uses.
func tileSlots(s backend.Segment) int {
	if s.Mode != backend.ModeTile {
		return 0
	}
	top := 0
	for i := range s.Len {
		top = max(top, fp8.TileIndex(s.ParamOffset+i, s.Cols, 128))
	}
	return top
}
