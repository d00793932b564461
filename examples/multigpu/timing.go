package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/gpu"
)

// phaseSync wraps a backend so that the step's phase timings measure the
// GPU work of each phase. The optimizer times its phases on the host; on a
// GPU the update and cast kernels are only queued there, so their time
// would show up in the next phase that waits. With On set, every Update and
// Cast waits for its kernel, and the last Update of a step (Updates calls
// per step) ends with a barrier on Comm, so that a rank whose kernels
// finish first does not count the difference in the next collective; the
// update phase then includes one barrier (see timeBarrier). On the GPU
// (phaseSyncGPU) the scales derived from the reduced amaxes are waited for
// too, so that the amax phase holds its all-reduce, which the device, not
// the host, waits for. Both backends are ShardUpdaters: the optimizer
// updates (and casts) every bucket with one call, which counts as the
// whole phase (updateShards). The cast phase has no barrier: on a backend
// that casts bucket by bucket the optimizer starts each bucket's
// all-gather right after queuing its cast, so a barrier there would queue
// behind the gathers of the buckets before (the cast phase then holds the
// cast kernels with the earlier buckets' gathers running beside them). Steps
// timed with On unset give the step time without any of these waits. Comm
// must be the optimizer's communicator.
type phaseSync struct {
	backend.Backend
	Comm    collective.Communicator
	Ctx     context.Context
	On      bool
	Updates int // Update calls per step: one per bucket

	updates int // calls so far in this step
}

// Update implements backend.Backend.
func (p *phaseSync) Update(a *backend.UpdateArgs) error {
	if err := p.Backend.Update(a); err != nil || !p.On {
		return err
	}
	return p.wait(&p.updates, p.Updates)
}

// Cast implements backend.Backend.
func (p *phaseSync) Cast(a *backend.CastArgs) error {
	if err := p.Backend.Cast(a); err != nil || !p.On {
		return err
	}
	return p.Backend.Sync()
}

// updateShards is Update for all buckets at once (p's backend must be an
// backend.ShardUpdater): the whole phase, then its wait and barrier.
func (p *phaseSync) updateShards(as []*backend.UpdateArgs) error {
	su, err := p.shardUpdater()
	if err != nil {
		return err
	}
	if err := su.UpdateShards(as); err != nil || !p.On {
		return err
	}
	p.updates = max(p.Updates-1, 0)
	return p.wait(&p.updates, p.Updates)
}

// castShards is Cast for all buckets at once.
func (p *phaseSync) castShards(cs []*backend.CastArgs) error {
	su, err := p.shardUpdater()
	if err != nil {
		return err
	}
	if err := su.CastShards(cs); err != nil || !p.On {
		return err
	}
	return p.Backend.Sync()
}

// shardUpdater returns p's backend as an backend.ShardUpdater.
func (p *phaseSync) shardUpdater() (backend.ShardUpdater, error) {
	su, ok := p.Backend.(backend.ShardUpdater)
	if !ok {
		return nil, fmt.Errorf("timing: backend %T updates bucket by bucket", p.Backend)
	}
	return su, nil
}

// planUpdate and planCast plan on p's backend (an backend.UpdatePlanner)
// an update and a cast whose runs are timed as updateShards and castShards
// time a call.
func (p *phaseSync) planUpdate(as []*backend.UpdateArgs) (backend.UpdatePlan, error) {
	pl, ok := p.Backend.(backend.UpdatePlanner)
	if !ok {
		return nil, fmt.Errorf("timing: backend %T plans no update", p.Backend)
	}
	up, err := pl.PlanUpdate(as)
	if err != nil {
		return nil, err
	}
	return timedUpdate{up, p}, nil
}

func (p *phaseSync) planCast(cs []*backend.CastArgs) (backend.CastPlan, error) {
	pl, ok := p.Backend.(backend.UpdatePlanner)
	if !ok {
		return nil, fmt.Errorf("timing: backend %T plans no cast", p.Backend)
	}
	cp, err := pl.PlanCast(cs)
	if err != nil {
		return nil, err
	}
	return timedCast{cp, p}, nil
}

// timedUpdate and timedCast are plans whose runs wait as phaseSync's calls do.
type (
	timedUpdate struct {
		backend.UpdatePlan
		p *phaseSync
	}
	timedCast struct {
		backend.CastPlan
		p *phaseSync
	}
)

// Run implements backend.UpdatePlan: the whole phase, then its wait and
// barrier.
func (t timedUpdate) Run(v backend.StepValues) error {
	if err := t.UpdatePlan.Run(v); err != nil || !t.p.On {
		return err
	}
	t.p.updates = max(t.p.Updates-1, 0)
	return t.p.wait(&t.p.updates, t.p.Updates)
}

// Run implements backend.CastPlan.
func (t timedCast) Run() error {
	if err := t.CastPlan.Run(); err != nil || !t.p.On {
		return err
	}
	return t.p.Backend.Sync()
}

// wait waits for the backend's work, and at the last call of a phase
// (*n reaching per) for every rank.
func (p *phaseSync) wait(n *int, per int) error {
	if err := p.Backend.Sync(); err != nil {
		return err
	}
	if *n++; *n < per || p.Comm == nil {
		return nil
	}
	*n = 0
	return collective.Barrier(p.Ctx, p.Comm)
}

// phaseSyncGPU is phaseSync over the GPU backend. It embeds the concrete
// *gpu.Backend, so that the optimizer still finds every optional interface
// the backend implements (GradStatsPlanner: the statistics of all buckets
// in one launch; DeviceScaler, DelayedScaler: scales derived on the device;
// AsyncReader, DeviceOrderer, GradAccumulator, OnDevice). phaseSync alone,
// an interface wrapped in an interface, hides them: the optimizer then
// falls back to one statistics launch per bucket and scales read back by
// the host, and the example would time a slower step than a user's.
type phaseSyncGPU struct {
	*gpu.Backend
	sync *phaseSync // its Backend is the same *gpu.Backend
}

// Update implements backend.Backend.
func (p phaseSyncGPU) Update(a *backend.UpdateArgs) error { return p.sync.Update(a) }

// Cast implements backend.Backend.
func (p phaseSyncGPU) Cast(a *backend.CastArgs) error { return p.sync.Cast(a) }

// UpdateShards implements backend.ShardUpdater.
func (p phaseSyncGPU) UpdateShards(as []*backend.UpdateArgs) error { return p.sync.updateShards(as) }

// CastShards implements backend.ShardUpdater.
func (p phaseSyncGPU) CastShards(cs []*backend.CastArgs) error { return p.sync.castShards(cs) }

// PlanUpdate implements backend.UpdatePlanner.
func (p phaseSyncGPU) PlanUpdate(as []*backend.UpdateArgs) (backend.UpdatePlan, error) {
	return p.sync.planUpdate(as)
}

// PlanCast implements backend.UpdatePlanner.
func (p phaseSyncGPU) PlanCast(cs []*backend.CastArgs) (backend.CastPlan, error) {
	return p.sync.planCast(cs)
}

// ScalesFromAmax implements backend.DeviceScaler; with On set it waits
// for the device (the amax all-reduce it was ordered after, and the scales).
func (p phaseSyncGPU) ScalesFromAmax(scale, scaleInv, amax, ctl buffer.Buffer, n int, r fp8.Recipe) error {
	if err := p.Backend.ScalesFromAmax(scale, scaleInv, amax, ctl, n, r); err != nil || !p.sync.On {
		return err
	}
	return p.Backend.Sync()
}

// phaseSyncCPU is phaseSync over the CPU backend, for the same reason
// (the CPU backend is a GradAccumulator).
type phaseSyncCPU struct {
	*cpu.Backend
	sync *phaseSync
}

// Update implements backend.Backend.
func (p phaseSyncCPU) Update(a *backend.UpdateArgs) error { return p.sync.Update(a) }

// Cast implements backend.Backend.
func (p phaseSyncCPU) Cast(a *backend.CastArgs) error { return p.sync.Cast(a) }

// UpdateShards implements backend.ShardUpdater.
func (p phaseSyncCPU) UpdateShards(as []*backend.UpdateArgs) error { return p.sync.updateShards(as) }

// CastShards implements backend.ShardUpdater.
func (p phaseSyncCPU) CastShards(cs []*backend.CastArgs) error { return p.sync.castShards(cs) }

// PlanUpdate implements backend.UpdatePlanner.
func (p phaseSyncCPU) PlanUpdate(as []*backend.UpdateArgs) (backend.UpdatePlan, error) {
	return p.sync.planUpdate(as)
}

// PlanCast implements backend.UpdatePlanner.
func (p phaseSyncCPU) PlanCast(cs []*backend.CastArgs) (backend.CastPlan, error) {
	return p.sync.planCast(cs)
}

// timedBackend returns the backend the optimizer gets: s behind the wrapper
// that keeps its backend's optional interfaces.
func timedBackend(s *phaseSync) backend.Backend {
	switch b := s.Backend.(type) {
	case *gpu.Backend:
		return phaseSyncGPU{Backend: b, sync: s}
	case *cpu.Backend:
		return phaseSyncCPU{Backend: b, sync: s}
	}
	return s
}

// timeBarrier returns the median time of n barriers on c, in milliseconds.
func timeBarrier(ctx context.Context, c collective.Communicator, n int) (float64, error) {
	ms := make([]float64, n)
	for i := range ms {
		t := time.Now()
		if err := collective.Barrier(ctx, c); err != nil {
			return 0, err
		}
		ms[i] = float64(time.Since(t)) / float64(time.Millisecond)
	}
	return median(ms), nil
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
