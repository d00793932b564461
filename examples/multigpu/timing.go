package main

import (
	"slices"
	"time"

	"github.com/distopt/distopt/optimizer"
)

// phaseSync wraps a backend so that the step's phase timings measure the
// GPU work of each phase. The optimizer times its phases on the host; on a
// GPU the update and cast kernels are only queued there, so their time
// would show up in the next phase that waits (the amax all-reduce, the
// all-gather). With On set, Update and Cast wait for their kernels.
// The waits add a few microseconds per bucket; steps timed with On unset
// give the step time without them.
type phaseSync struct {
	optimizer.Backend
	On bool
}

// Update implements optimizer.Backend.
func (p *phaseSync) Update(a *optimizer.UpdateArgs) error {
	if err := p.Backend.Update(a); err != nil || !p.On {
		return err
	}
	return p.Backend.Sync()
}

// Cast implements optimizer.Backend.
func (p *phaseSync) Cast(a *optimizer.CastArgs) error {
	if err := p.Backend.Cast(a); err != nil || !p.On {
		return err
	}
	return p.Backend.Sync()
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
