package optimizer_test

import (
	"context"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// batching is the deferring backend with a Batch (backend.Batcher) that
// records which of the step's calls (updates, casts, one call, one per
// bucket or a plan's run, and reads back) ran inside one.
type batching struct {
	deferring
	depth, batches, inside, outside int
	steps                           bool // New has returned
}

func (b *batching) Batch(fn func() error) error {
	b.steps = true
	b.batches++
	b.depth++
	defer func() { b.depth-- }()
	return fn()
}

// count counts a call inside or outside a Batch; before the first step
// (New casts the initial weights) it counts nothing.
func (b *batching) count() {
	switch {
	case b.depth > 0:
		b.inside++
	case b.steps:
		b.outside++
	}
}

func (b *batching) Update(a *backend.UpdateArgs) error { b.count(); return b.deferring.Update(a) }

func (b *batching) Cast(a *backend.CastArgs) error { b.count(); return b.deferring.Cast(a) }

func (b *batching) UpdateShards(as []*backend.UpdateArgs) error {
	b.count()
	return b.deferring.UpdateShards(as)
}

func (b *batching) CastShards(cs []*backend.CastArgs) error {
	b.count()
	return b.deferring.CastShards(cs)
}

func (b *batching) PlanUpdate(as []*backend.UpdateArgs) (backend.UpdatePlan, error) {
	p, err := b.deferring.PlanUpdate(as)
	return hookedUpdate{p, func(backend.StepValues) { b.count() }}, err
}

func (b *batching) PlanCast(cs []*backend.CastArgs) (backend.CastPlan, error) {
	p, err := b.deferring.PlanCast(cs)
	return hookedCast{p, b.count}, err
}

func (b *batching) Control(ctl, stats buffer.Buffer) error {
	b.steps = true // a step's decision: New has returned
	return b.deferring.Control(ctl, stats)
}

func (b *batching) ReadLater(src buffer.Buffer, n int) (backend.PendingRead, error) {
	b.count()
	return b.deferring.ReadLater(src, n)
}

// TestBatchedStep trains 2 ranks through StepAsync on a backend that is a
// Batcher, for every configuration with a skipped step: every update,
// cast and read-back of a step whose decision stays on the device runs
// inside one Batch per step, and the state equals that of the synchronous
// Step on the CPU backend bit for bit. The synchronous Step of the same
// backend makes no Batch (it waits for the device).
func TestBatchedStep(t *testing.T) {
	params := optimizertest.AwkwardParams()
	ov := overlapVariants[0]
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			grad := nanGrad(ov.MicroBatches)
			want := optimizertest.Run(t, 2, overlapSteps, params, cfg, grad)
			counts := make([]batching, 2)
			got := optimizertest.RunRanks(t, 2, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
				be := &counts[comm.Rank()]
				be.deferring = deferring{deviceScaler: deviceScaler{Backend: cpu.New(1)}}
				return optimizertest.TrainOverlapped(ctx, comm, be, params, cfg, overlapSteps, grad, ov)
			})
			for r := range 2 {
				sameRun(t, name, want[r], got[r])
				c := counts[r]
				if c.batches != overlapSteps || c.outside != 0 || c.inside == 0 {
					t.Errorf("rank %d: %d batches for %d steps; %d calls inside, %d outside: want one a step, every call inside", r, c.batches, overlapSteps, c.inside, c.outside)
				}
			}
		})
	}
	t.Run("sync", func(t *testing.T) {
		cfg := optimizertest.Configs()["E4M3 TensorCurrent(margin=0, pow2=false)"]
		var be batching
		be.deferring = deferring{deviceScaler: deviceScaler{Backend: cpu.New(1)}}
		optimizertest.RunRanks(t, 1, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
			return optimizertest.TrainOverlapped(ctx, comm, &be, params, cfg, 2, nanGrad(1), optimizertest.Overlap{MicroBatches: 1, Sync: true})
		})
		if be.batches != 0 || be.inside != 0 || be.outside == 0 {
			t.Errorf("Step: %d batches, %d calls inside, %d outside: want none inside a batch", be.batches, be.inside, be.outside)
		}
	})
}
