package optimizer

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
)

// GradStatsPlanner is implemented by backends that can prepare, once, the
// statistics of a fixed list of gradient buffers, so that each step adds
// them with one launch and no work per buffer on the host (the GPU
// backend). The optimizer plans its buckets' gradient shards when it is
// made and uses the plan at every step; other backends get one GradStats
// call per bucket.
type GradStatsPlanner interface {
	// PlanGradStats returns a plan whose Run adds to stats exactly what
	// GradStats(stats, grads[i], gt, ns[i]) for every i in turn adds (the
	// same bits). stats and the buffers must outlive the plan; Close
	// releases what the plan holds.
	PlanGradStats(stats buffer.Buffer, grads []buffer.Buffer, gt buffer.DType, ns []int) (GradStatsPlan, error)
}

// GradStatsPlan is a statistics pass prepared by a GradStatsPlanner.
type GradStatsPlan interface {
	// Run adds the statistics of the planned gradients to the plan's stats
	// (asynchronously, as GradStats).
	Run() error
	// Close releases the plan; it must not be run afterwards.
	Close() error
}

// planGradStats makes o.statsPlan over every bucket's gradient shard when
// the backend is a GradStatsPlanner.
func (o *Optimizer) planGradStats() error {
	p, ok := o.be.(GradStatsPlanner)
	if !ok {
		return nil
	}
	grads := make([]buffer.Buffer, len(o.buckets))
	ns := make([]int, len(o.buckets))
	for i, bk := range o.buckets {
		grads[i], ns[i] = o.gradShard(bk), bk.b.ShardSize
	}
	plan, err := p.PlanGradStats(o.stats, grads, o.cfg.GradType, ns)
	if err != nil {
		return fmt.Errorf("optimizer: planning the gradient statistics: %w", err)
	}
	o.statsPlan = plan
	return nil
}

// addGradStats adds the statistics of every bucket's gradient shard to
// o.stats: through the plan when there is one, else bucket by bucket.
func (o *Optimizer) addGradStats() error {
	if o.statsPlan != nil {
		return o.statsPlan.Run()
	}
	for _, bk := range o.buckets {
		if err := o.be.GradStats(o.stats, o.gradShard(bk), o.cfg.GradType, bk.b.ShardSize); err != nil {
			return err
		}
	}
	return nil
}
