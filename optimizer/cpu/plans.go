package cpu

import (
	"github.com/distopt/distopt/optimizer/backend"
)

// PlanUpdate implements backend.UpdatePlanner: the plan keeps a copy of
// as, and each Run updates the shards one by one with the step's values
// (backend.StepValues.Apply). On the host a plan saves nothing; it is the
// reference of the planned path.
func (c *Backend) PlanUpdate(as []*backend.UpdateArgs) (backend.UpdatePlan, error) {
	if err := backend.CheckShards(as); err != nil {
		return nil, err
	}
	p := &updatePlan{c: c, as: make([]*backend.UpdateArgs, len(as))}
	for i, a := range as {
		b := *a
		p.as[i] = &b
	}
	return p, nil
}

// updatePlan is a planned update on the host.
type updatePlan struct {
	c  *Backend
	as []*backend.UpdateArgs
}

// Run implements backend.UpdatePlan.
func (p *updatePlan) Run(v backend.StepValues) error {
	as, err := v.Apply(p.as)
	if err != nil {
		return err
	}
	for _, a := range as {
		if err := p.c.Update(a); err != nil {
			return err
		}
	}
	return nil
}

// Close implements backend.UpdatePlan.
func (p *updatePlan) Close() error { return nil }

// PlanCast implements backend.UpdatePlanner: each Run casts the shards of
// a copy of cs one by one.
func (c *Backend) PlanCast(cs []*backend.CastArgs) (backend.CastPlan, error) {
	if err := backend.CheckCastShards(cs); err != nil {
		return nil, err
	}
	p := &castPlan{c: c, cs: make([]backend.CastArgs, len(cs))}
	for i, a := range cs {
		p.cs[i] = *a
	}
	return p, nil
}

// castPlan is a planned cast on the host.
type castPlan struct {
	c  *Backend
	cs []backend.CastArgs
}

// Run implements backend.CastPlan.
func (p *castPlan) Run() error {
	for i := range p.cs {
		if err := p.c.Cast(&p.cs[i]); err != nil {
			return err
		}
	}
	return nil
}

// Close implements backend.CastPlan.
func (p *castPlan) Close() error { return nil }

var _ backend.UpdatePlanner = (*Backend)(nil)
