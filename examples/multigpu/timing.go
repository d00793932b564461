package main

import (
	"context"
	"slices"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// phaseSync wraps a backend so that the step's phase timings measure the
// GPU work of each phase. The optimizer times its phases on the host; on a
// GPU the update and cast kernels are only queued there, so their time
// would show up in the next phase that waits (the amax all-reduce, the
// all-gather). And a rank whose kernels finish first waits for the others
// in the next collective, which would then count the difference. With On
// set, Update and Cast wait for their kernels and then for every rank
// (a barrier on Comm), so that each collective phase times the collective
// alone. The waits add some tens of microseconds per bucket to the update
// and cast phases; steps timed with On unset give the step time without
// them. Comm must be the optimizer's communicator: the optimizer calls
// Update and Cast with no collective in flight, every rank as often.
type phaseSync struct {
	optimizer.Backend
	Comm collective.Communicator
	Ctx  context.Context
	On   bool
}

// Update implements optimizer.Backend.
func (p *phaseSync) Update(a *optimizer.UpdateArgs) error {
	if err := p.Backend.Update(a); err != nil || !p.On {
		return err
	}
	return p.wait()
}

// Cast implements optimizer.Backend.
func (p *phaseSync) Cast(a *optimizer.CastArgs) error {
	if err := p.Backend.Cast(a); err != nil || !p.On {
		return err
	}
	return p.wait()
}

// wait waits for the backend's work, then for every rank.
func (p *phaseSync) wait() error {
	if err := p.Backend.Sync(); err != nil || p.Comm == nil {
		return err
	}
	return collective.Barrier(p.Ctx, p.Comm)
}

// Phase names, in step order, as the JSON and the charts call them.
var phaseNames = []string{"reduce_scatter", "norm", "update", "amax_reduce", "cast", "all_gather"}

// phases lists a step's timings in the order of phaseNames, in milliseconds.
func phases(t optimizer.Timings) []float64 {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return []float64{ms(t.ReduceScatter), ms(t.Norm), ms(t.Update), ms(t.AmaxReduce), ms(t.Cast), ms(t.AllGather)}
}

// median returns the median of xs (the mean of the middle two for an even
// count; 0 for none). xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// sum returns the sum of xs.
func sum(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return t
}
