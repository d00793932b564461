package optimizer_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// planner is the CPU backend that plans the gradient statistics
// (backend.GradStatsPlanner), as the GPU backend does: its plan keeps the
// buffers and counts it was given and adds their statistics at each Run.
// It counts plans, runs, closes and direct GradStats calls.
type planner struct {
	*cpu.Backend
	mu                          sync.Mutex
	plans, runs, closes, direct int
}

type cpuPlan struct {
	p     *planner
	stats buffer.Buffer
	grads []buffer.Buffer
	gt    buffer.DType
	ns    []int
}

func (p *planner) PlanGradStats(stats buffer.Buffer, grads []buffer.Buffer, gt buffer.DType, ns []int) (backend.GradStatsPlan, error) {
	p.plans++
	return &cpuPlan{p: p, stats: stats, grads: slices.Clone(grads), gt: gt, ns: slices.Clone(ns)}, nil
}

func (p *planner) GradStats(stats, grad buffer.Buffer, gt buffer.DType, n int) error {
	p.mu.Lock()
	p.direct++
	p.mu.Unlock()
	return p.Backend.GradStats(stats, grad, gt, n)
}

func (c *cpuPlan) Run() error {
	c.p.mu.Lock()
	c.p.runs++
	c.p.mu.Unlock()
	for i, g := range c.grads {
		if err := c.p.Backend.GradStats(c.stats, g, c.gt, c.ns[i]); err != nil {
			return err
		}
	}
	return nil
}

func (c *cpuPlan) Close() error {
	c.p.closes++
	return nil
}

// TestGradStatsPlan trains 3 ranks whose backend plans the gradient
// statistics and 3 ranks of the plain CPU backend, for every configuration
// and through the synchronous step, the overlapped pipeline and sharded
// gradients: results and state must be bit-identical (so the plan was given
// every bucket's gradient shard with its count), the plan made once, run
// once per step and closed, and GradStats never called per bucket.
func TestGradStatsPlan(t *testing.T) {
	params := optimizertest.AwkwardParams()
	ov := overlapVariants[1]
	micro := ov.MicroBatches
	for name, cfg := range optimizertest.Configs() {
		for _, how := range []string{"sync", "overlapped", "sharded"} {
			t.Run(name+" "+how, func(t *testing.T) {
				micro := micro
				if how == "sharded" {
					micro = 1
				}
				grad := nanGrad(micro)
				want := optimizertest.Run(t, 3, overlapSteps, params, cfg, optimizertest.Accumulated(grad, micro))
				bes := make([]*planner, 3)
				got := optimizertest.RunRanks(t, 3, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
					be := &planner{Backend: cpu.New(1)}
					bes[comm.Rank()] = be
					switch how {
					case "overlapped":
						return optimizertest.TrainOverlapped(ctx, comm, be, params, cfg, overlapSteps, grad, ov)
					case "sharded":
						return trainShardedOn(ctx, comm, be, params, cfg, overlapSteps, 1, grad, false)
					}
					return optimizertest.Train(ctx, comm, be, params, cfg, overlapSteps, optimizertest.Accumulated(grad, micro))
				})
				for r, be := range bes {
					sameRun(t, name, want[r], got[r])
					if be.plans != 1 || be.runs != overlapSteps || be.closes != 1 || be.direct != 0 {
						t.Errorf("rank %d: %d plans, %d runs, %d closes, %d GradStats calls; want 1, %d, 1, 0", r, be.plans, be.runs, be.closes, be.direct, overlapSteps)
					}
				}
			})
		}
	}
}
