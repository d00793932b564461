package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// This file holds the planner's two gradient options: a full-size gradient
// buffer per rank (the default), or sharded gradients (-sharded-grads,
// optimizer.Config.ShardedGradients): a pool of -grad-buffers bucket-sized
// buffers and a gradient shard. The comparison table shows the option not
// chosen as well.

// gradientAlternative fills p.alt with the device total of every d under
// the gradient option o does not choose.
func (p *memoryPlan) gradientAlternative(o planOptions, params []optimizer.Param) error {
	cfg := o.cfg
	cfg.ShardedGradients = !cfg.ShardedGradients
	cfg.GradBuffers = 0
	p.altName = "distopt, sharded gradients (-sharded-grads)"
	if !cfg.ShardedGradients {
		p.altName = "distopt, full gradient buffers"
	}
	for _, d := range o.ds {
		world, err := o.shardWorld(d)
		if err != nil {
			return err
		}
		r, err := optimizer.PredictMemory(params, world, cfg)
		if err != nil {
			return fmt.Errorf("d=%d: %w", d, err)
		}
		s, err := commScratch(params, world, cfg, o)
		if err != nil {
			return fmt.Errorf("d=%d: %w", d, err)
		}
		m, err := fp8Memory(params, world, cfg, o.gradFP8)
		if err != nil {
			return fmt.Errorf("d=%d: %w", d, err)
		}
		p.alt = append(p.alt, r.Total()+s+m.Staging+m.Residual)
	}
	return nil
}

// writeAlternative prints the comparison row of p.alt.
func (p *memoryPlan) writeAlternative(w io.Writer) {
	fmt.Fprintf(w, rowFormat(), p.altName, "exact")
	for _, t := range p.alt {
		fmt.Fprint(w, " "+gibCell(float64(t), p.gpu.Bytes))
	}
	fmt.Fprintln(w)
}

// gradientClosedForm returns the gradient terms of the closed form in
// bytes per parameter over n parameters and their formula: g bytes per
// parameter unsharded; sharded, g/d plus GradBuffers buckets of g bytes
// per element (gradPool's buckets).
func gradientClosedForm(cfg optimizer.Config, g float64, n, largest int64) (perRank, sharded float64, formula string) {
	if !cfg.ShardedGradients {
		return g, 0, strconv.FormatFloat(g, 'g', 4, 64)
	}
	k, frac := gradPool(cfg, n, largest)
	pool := frac * g
	return pool, g, fmt.Sprintf("%s (%d buckets)", strconv.FormatFloat(pool, 'g', 3, 64), k)
}

// gradPool returns the buffers of the sharded-gradient pool (GradBuffers,
// default 2) and the elements they hold per parameter over n parameters.
// Each holds the largest bucket: the bucket size of the layout options, or
// the largest parameter when it is larger (it has a bucket of its own), at
// most the n parameters; padding ignored.
func gradPool(cfg optimizer.Config, n, largest int64) (buffers int, perParam float64) {
	k := cfg.GradBuffers
	if k == 0 {
		k = 2
	}
	b := cfg.Layout.BucketElements
	if b == 0 {
		b = shard.DefaultBucketElements
	}
	return k, float64(k) * float64(min(max(int64(b), largest), n)) / float64(n)
}
