package gpu

import (
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer/backend"
)

// updatePlan is an update planned once (backend.UpdatePlan): the table of
// UpdateShards' launch over the planned shards, packed when the plan is
// made, and its device copy. A Run writes the step's factors and seeds
// into the table and copies it to the device only when they changed.
type updatePlan struct {
	b    *Backend
	as   []*backend.UpdateArgs // the planned shards; the launch's arguments are as[0]'s (CheckShards)
	t    kernels.Table
	seed bool   // the kernels read the shards' seeds (readsSeed)
	e    *table // t's device copy (nil: no chunks)
}

// PlanUpdate implements backend.UpdatePlanner: the plan packs the table of
// UpdateShards(as) once; each Run writes its factors and seeds in place
// and launches what UpdateShards launches.
func (b *Backend) PlanUpdate(as []*backend.UpdateArgs) (backend.UpdatePlan, error) {
	if err := backend.CheckShards(as); err != nil {
		return nil, err
	}
	t, err := shardTable(as, b.ptr)
	if err != nil {
		return nil, err
	}
	p := &updatePlan{b: b, as: make([]*backend.UpdateArgs, len(as)), t: t, seed: readsSeed(as[0])}
	for i, a := range as {
		c := *a
		p.as[i] = &c
	}
	if p.e, err = b.planTable(t); err != nil {
		return nil, err
	}
	return p, nil
}

// Run implements backend.UpdatePlan.
func (p *updatePlan) Run(v backend.StepValues) error {
	if err := backend.CheckStepValues(p.as, v); err != nil {
		return err
	}
	changed := p.setStep(v)
	a := *p.as[0]
	a.Hyper, a.MomentSeed = v.Hyper, v.Seeds[0]
	return p.b.onWorker(func() error {
		if p.e == nil && p.t.Chunks > 0 {
			return fmt.Errorf("gpu: update plan run after Close: %w", cuda.ErrClosed)
		}
		tp, err := p.b.planned(p.e, p.t.Bytes, changed)
		if err != nil {
			return err
		}
		l := p.b.updateLaunch(&a, p.t, tp)
		setHP(l, p.as)
		return p.b.ks.Update(p.b.s, l)
	})
}

// setStep writes v's factors and (where the kernels read them) seeds into
// p.t, as shardTable packs them, and reports whether any changed.
func (p *updatePlan) setStep(v backend.StepValues) bool {
	changed, row := false, 0
	r := p.as[0].Rule
	for i, a := range p.as {
		for j, s := range a.Segments {
			if s.Len <= 0 {
				continue // not packed (kernels.PackShards)
			}
			step, second := v.Factors[i][j].Pair(r)
			changed = p.t.SetFactors(row, step, second) || changed
			row++
		}
		if p.seed {
			changed = p.t.SetSeed(i, v.Seeds[i]) || changed
		}
	}
	return changed
}

// Close implements backend.UpdatePlan: it waits for the stream, then frees
// the table.
func (p *updatePlan) Close() error {
	e := p.e
	p.e = nil
	return p.b.releaseTable(e)
}

// castPlan is a cast planned once (backend.CastPlan): the table of
// CastShards' launch, packed and copied to the device once.
type castPlan struct {
	b *Backend
	c backend.CastArgs // the launch's Format, Scale and Control: the first shard's
	t kernels.Table
	e *table
}

// PlanCast implements backend.UpdatePlanner: each Run launches what
// CastShards(cs) launches, over a table packed once.
func (b *Backend) PlanCast(cs []*backend.CastArgs) (backend.CastPlan, error) {
	if err := backend.CheckCastShards(cs); err != nil {
		return nil, err
	}
	t, err := castTable(cs, b.ptr)
	if err != nil {
		return nil, err
	}
	e, err := b.planTable(t)
	if err != nil {
		return nil, err
	}
	return &castPlan{b: b, c: *cs[0], t: t, e: e}, nil
}

// Run implements backend.CastPlan.
func (p *castPlan) Run() error {
	return p.b.onWorker(func() error {
		if p.e == nil && p.t.Chunks > 0 {
			return fmt.Errorf("gpu: cast plan run after Close: %w", cuda.ErrClosed)
		}
		tp, err := p.b.planned(p.e, p.t.Bytes, false)
		if err != nil {
			return err
		}
		return p.b.ks.CastSegments(p.b.s, 0, 0, p.t, tp, p.b.ptr(p.c.Scale), p.c.Format, p.b.ptr(p.c.Control))
	})
}

// Close implements backend.CastPlan: it waits for the stream, then frees
// the table.
func (p *castPlan) Close() error {
	e := p.e
	p.e = nil
	return p.b.releaseTable(e)
}

// planTable allocates the device copy of a plan's table t, to be copied
// at its first run (nil for a table without chunks, which launches read
// nothing of).
func (b *Backend) planTable(t kernels.Table) (*table, error) {
	if t.Chunks == 0 {
		return nil, nil
	}
	var e *table
	err := b.onWorker(func() error {
		var err error
		if e, err = b.allocTable(len(t.Bytes)); err == nil {
			b.plans[e] = true
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	e.stale = true
	return e, nil
}

var _ backend.UpdatePlanner = (*Backend)(nil)
