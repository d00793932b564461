package optimizer_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/cpu"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// hookedUpdate and hookedCast are plans that call a hook at each run.
type (
	hookedUpdate struct {
		backend.UpdatePlan
		hook func(backend.StepValues)
	}
	hookedCast struct {
		backend.CastPlan
		hook func()
	}
)

func (p hookedUpdate) Run(v backend.StepValues) error { p.hook(v); return p.UpdatePlan.Run(v) }

func (p hookedCast) Run() error { p.hook(); return p.CastPlan.Run() }

// planRecorder is the CPU backend counting the plans it makes and the
// runs of its planned cast, and keeping the values of every run of its
// planned update.
type planRecorder struct {
	*cpu.Backend
	updatePlans, castPlans, castRuns int
	values                           []backend.StepValues
}

func (b *planRecorder) PlanUpdate(as []*backend.UpdateArgs) (backend.UpdatePlan, error) {
	b.updatePlans++
	p, err := b.Backend.PlanUpdate(as)
	if err != nil {
		return nil, err
	}
	return hookedUpdate{p, func(v backend.StepValues) { b.values = append(b.values, v) }}, nil
}

func (b *planRecorder) PlanCast(cs []*backend.CastArgs) (backend.CastPlan, error) {
	b.castPlans++
	p, err := b.Backend.PlanCast(cs)
	if err != nil {
		return nil, err
	}
	return hookedCast{p, func() { b.castRuns++ }}, nil
}

// unplanned is the CPU backend without its plans: each step packs every
// bucket's arguments for UpdateShards and CastShards.
type unplanned struct {
	backend.Backend
	backend.ShardUpdater
}

// TestPlannedSteps trains 2 ranks for 8 steps (one skipped) through the
// schedules of optimizertest.Groups, a warmup-cosine rate over 6 steps and
// a constant one, for every configuration, on the CPU backend's plans and
// without them: the states must agree bit for bit. The update must be
// planned once, when the optimizer is made, and run at every step taken
// with that step's values: factors that change from step to step, and
// seeds from backend.MomentSeed.
func TestPlannedSteps(t *testing.T) {
	params := optimizertest.AwkwardParams()
	const steps = 8
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			want := optimizertest.RunRanks(t, 2, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
				b := cpu.New(1)
				return optimizertest.Train(ctx, comm, unplanned{b, b}, params, cfg, steps, nanGrad(1))
			})
			recs := make([]planRecorder, 2)
			got := optimizertest.RunRanks(t, 2, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
				rec := &recs[comm.Rank()]
				rec.Backend = cpu.New(1)
				return optimizertest.Train(ctx, comm, rec, params, cfg, steps, nanGrad(1))
			})
			for r := range 2 {
				sameRun(t, name, want[r], got[r])
				checkPlanned(t, name, &recs[r], got[r].Results)
			}
		})
	}
}

// checkPlanned fails t unless rec made one plan of each kind at most (one
// of the update) and ran them at each step taken of results, the update
// with seeds of the step and factors that changed between the first two.
func checkPlanned(t *testing.T, what string, rec *planRecorder, results []optimizer.StepResult) {
	t.Helper()
	var taken []int // the step count of each step taken
	for _, res := range results {
		if !res.Skipped {
			taken = append(taken, res.Step)
		}
	}
	if rec.updatePlans != 1 || rec.castPlans > 1 || len(rec.values) != len(taken) || rec.castRuns != rec.castPlans*len(taken) {
		t.Fatalf("%s: %d update and %d cast plans made, run %d and %d times; want 1 and at most 1, run at each of the %d steps taken", what, rec.updatePlans, rec.castPlans, len(rec.values), rec.castRuns, len(taken))
	}
	if len(taken) < 2 || reflect.DeepEqual(rec.values[0].Factors, rec.values[1].Factors) {
		t.Errorf("%s: the first two steps taken have the same factors: the schedule does not show", what)
	}
	for k, v := range rec.values {
		for i, seed := range v.Seeds {
			if want := backend.MomentSeed(taken[k], i); seed != want {
				t.Errorf("%s: step %d, bucket %d: seed %d, want %d", what, taken[k], i, seed, want)
			}
		}
	}
}

// failingPlans is the CPU backend whose plans fail, the update's or the
// cast's.
type failingPlans struct {
	*cpu.Backend
	update bool
}

var errPlan = errors.New("no plan today")

func (b failingPlans) PlanUpdate(as []*backend.UpdateArgs) (backend.UpdatePlan, error) {
	if b.update {
		return nil, errPlan
	}
	return b.Backend.PlanUpdate(as)
}

// PlanCast fails with a plan beside its error, as a wrapper of a failing
// planner may (examples/multigpu's did): the caller must not keep it.
func (b failingPlans) PlanCast(cs []*backend.CastArgs) (backend.CastPlan, error) {
	return hookedCast{}, errPlan
}

// TestPlanErrors checks that New reports a plan that fails, the update's
// or the cast's, with the planner's error, and closes what it made: no
// failed plan is kept for Close to run.
func TestPlanErrors(t *testing.T) {
	params := optimizertest.AwkwardParams()
	for _, update := range []bool{true, false} {
		cfg := optimizer.Config{Groups: optimizertest.Groups(), Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}}
		_, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], failingPlans{cpu.New(1), update}, params,
			optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
		if !errors.Is(err, errPlan) || !strings.Contains(err.Error(), "planning the") {
			t.Errorf("update plan fails %t: New: %v", update, err)
		}
	}
}
