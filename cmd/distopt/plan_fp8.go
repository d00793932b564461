package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// This file holds the planner's FP8 gradient reduce-scatter
// (collective/fp8grad, -grad-fp8): the wire buffers the Comm stages on
// each rank and the error feedback residuals (-grad-ef), as
// fp8grad.PredictSteps counts them over the optimizer's buckets.

// gradFP8Flags are the flags of the FP8 gradient reduce-scatter.
type gradFP8Flags struct {
	format *string
	block  *int
	ef     *bool
}

// registerGradFP8 defines -grad-fp8, -grad-block and -grad-ef on fs (the
// names of examples/gpt).
func registerGradFP8(fs *flag.FlagSet) gradFP8Flags {
	return gradFP8Flags{
		format: fs.String("grad-fp8", "", "FP8 gradient reduce-scatter (collective/fp8grad): e4m3 or e5m2; adds its staging buffers and, with -grad-ef, its residuals (default: off)"),
		block:  fs.Int("grad-block", 0, fmt.Sprintf("elements per scale of -grad-fp8 (0: %d)", fp8grad.DefaultBlock)),
		ef:     fs.Bool("grad-ef", false, "error feedback of -grad-fp8: a float32 residual per gradient element of every bucket"),
	}
}

// config returns the fp8grad configuration of the flags, nil without
// -grad-fp8.
func (f gradFP8Flags) config() (*fp8grad.Config, error) {
	var c fp8grad.Config
	switch strings.ToLower(*f.format) {
	case "":
		if *f.block != 0 || *f.ef {
			return nil, fmt.Errorf("-grad-block and -grad-ef need -grad-fp8 e4m3 or e5m2")
		}
		return nil, nil
	case "e4m3":
		c.Format = fp8.E4M3
	case "e5m2":
		c.Format = fp8.E5M2
	default:
		return nil, fmt.Errorf("-grad-fp8=%q: want e4m3 or e5m2", *f.format)
	}
	if *f.block < 0 {
		return nil, fmt.Errorf("-grad-block=%d: want a positive block (0: %d)", *f.block, fp8grad.DefaultBlock)
	}
	c.Block, c.ErrorFeedback = *f.block, *f.ef
	if c.Block == 0 {
		c.Block = fp8grad.DefaultBlock
	}
	return &c, nil
}

// planLayout is the optimizer's layout of params on world ranks under
// cfg: its layout options with the default optimizer.New applies (FP8
// moments align high-precision parameters to the moment block).
func planLayout(params []optimizer.Param, world int, cfg optimizer.Config) (*shard.Layout, error) {
	opts := cfg.Layout
	block := cfg.MomentBlock
	if block == 0 {
		block = 128
	}
	fp8Moments := cfg.FirstMomentType == optimizer.MomentFP8 || cfg.SecondMomentType == optimizer.MomentFP8 && cfg.Rule != optimizer.RuleSGD
	if fp8Moments && opts.HighPrecisionAlign == 0 {
		opts.HighPrecisionAlign = max(shard.HighPrecisionAlign, block)
	}
	return optimizer.NewLayout(params, world, opts)
}

// Rows of the FP8 gradient reduce-scatter in the table of `distopt plan`.
const (
	rowFP8Staging  = "fp8 gradient staging"
	rowFP8Residual = "fp8 gradient residuals"
)

// fp8Memory is what an fp8grad Comm under fc holds on each of world ranks
// for the gradient reduce-scatters of the optimizer of cfg: every bucket
// once in the backward order (the last bucket first), all in flight at
// once with full gradient buffers, at most Config.GradBuffers with sharded
// gradients. Without fc, none.
func fp8Memory(params []optimizer.Param, world int, cfg optimizer.Config, fc *fp8grad.Config) (fp8grad.Memory, error) {
	if fc == nil {
		return fp8grad.Memory{}, nil
	}
	l, err := planLayout(params, world, cfg)
	if err != nil {
		return fp8grad.Memory{}, err
	}
	s := fp8grad.Steps{Ranks: world}
	for b := len(l.Buckets) - 1; b >= 0; b-- {
		s.Buckets = append(s.Buckets, l.Buckets[b].Size)
	}
	if cfg.ShardedGradients {
		s.InFlight = cfg.GradBuffers
		if s.InFlight == 0 {
			s.InFlight = 2
		}
	}
	return fp8grad.PredictSteps(s, *fc)
}

// fp8ClosedForm returns the FP8 gradient terms of the closed form in bytes
// per parameter and their formula: the staging, 2 x (1 + 4/block) bytes
// per element of every bucket (of GradBuffers buckets with sharded
// gradients), and the residual, 4 bytes per parameter with error feedback.
func fp8ClosedForm(cfg optimizer.Config, fc *fp8grad.Config, n, largest int64) (float64, string) {
	if fc == nil {
		return 0, ""
	}
	wire := 2 * fp8grad.WireBytesPerElement(fc.Block)
	stage := wire
	form := strconv.FormatFloat(stage, 'g', 4, 64)
	if cfg.ShardedGradients {
		_, frac := gradPool(cfg, n, largest)
		stage = wire * frac
		form = strconv.FormatFloat(stage, 'g', 3, 64)
	}
	if fc.ErrorFeedback {
		return stage + 4, form + " + 4"
	}
	return stage, form
}

// fp8Description names the FP8 gradient reduce-scatter for the
// configuration line and the chart ("" without it).
func fp8Description(fc *fp8grad.Config) string {
	if fc == nil {
		return ""
	}
	s := fmt.Sprintf("FP8 gradient reduce-scatter %v in blocks of %d", fc.Format, fc.Block)
	if fc.ErrorFeedback {
		s += " with error feedback"
	}
	return s
}
