package optimizer

import (
	"context"
	"log/slog"

	"github.com/distopt/distopt/optimizer/backend"
)

// The optimizer prints nothing. Config.Logger, when set, receives what a
// user may want to see: a skipped step and why (Warn), a rank stepping
// with zero gradients because it wrote none (Info), and, at New, the
// slower paths a backend without an optional interface takes (Debug).

// discard is the logger of a Config without one.
var discard = slog.New(slog.DiscardHandler)

// logger is c.Logger, or one that discards everything.
func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return discard
}

// logFallbacks logs, at debug level, each optional interface the backend
// lacks and the path the steps take instead.
func (o *Optimizer) logFallbacks() {
	l := o.cfg.logger()
	if !l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	_, su := o.backend.(backend.ShardUpdater)
	_, ds := o.backend.(backend.DeviceScaler)
	_, ar := o.backend.(backend.AsyncReader)
	_, up := o.backend.(backend.UpdatePlanner)
	for _, f := range []struct {
		has  bool
		path string
	}{
		{su, "no ShardUpdater: one update and one cast call per bucket"},
		{ds, "no DeviceScaler: FP8 scales derived on the host from the amaxes read back"},
		{ar, "no AsyncReader: StepAsync waits for the step's decision on the host"},
		{o.statsPlan != nil, "no GradStatsPlanner: gradient statistics one bucket at a time"},
		{up, "no UpdatePlanner: each step packs every bucket's segment table"},
	} {
		if !f.has {
			l.Debug("optimizer: fallback", "backend", o.backend.Name(), "rank", o.rank, "path", f.path)
		}
	}
}

// logSkip logs a skipped step and why.
func (o *Optimizer) logSkip(res *StepResult) {
	o.cfg.logger().Warn("optimizer: step skipped", "steps_taken", res.Step, "rank", o.rank, "reason", res.Reason, "loss_scale", res.LossScale)
}
