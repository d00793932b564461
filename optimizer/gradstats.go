package optimizer

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// planGradStats makes o.statsPlan over every bucket's gradient shard when
// the backend is a GradStatsPlanner.
func (o *Optimizer) planGradStats() error {
	p, ok := o.backend.(backend.GradStatsPlanner)
	if !ok || o.cfg.ExternalGradients { // a plan would hold buffers lent for one step
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
		if err := o.backend.GradStats(o.stats, o.gradShard(bk), o.cfg.GradType, bk.b.ShardSize); err != nil {
			return err
		}
	}
	return nil
}
