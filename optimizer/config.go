package optimizer

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/shard"
)

// Param is one parameter the optimizer owns.
type Param struct {
	Name  string
	Shape []int
	// HighPrecision parameters (norms, biases) are gathered as
	// Config.HighPrecisionType instead of FP8.
	HighPrecision bool
	// NoDecay exempts the parameter from weight decay.
	NoDecay bool
	// Group indexes Config.Groups (0 when there are none).
	Group int
}

// Group is a set of parameters sharing a learning rate and weight decay.
type Group struct {
	Name        string
	LR          Schedule
	WeightDecay float64
}

// Config configures the optimizer. Zero fields take the defaults given.
type Config struct {
	// Rule is RuleAdamW (default) or RuleSGD.
	Rule Rule
	// LR and WeightDecay apply when Groups is empty. Default LR: Constant(1e-3).
	LR          Schedule
	WeightDecay float64
	Groups      []Group
	// Beta1, Beta2, Eps of AdamW: defaults 0.9, 0.999, 1e-8.
	Beta1, Beta2, Eps float64
	// Momentum of SGD (0: plain SGD).
	Momentum float64
	// MaxGradNorm clips the global gradient norm (0: no clipping).
	MaxGradNorm float64
	// Logger receives a skipped step and why, a rank stepping with zero
	// gradients, and the slower paths of a backend (logging.go). Nil: the
	// optimizer logs nothing. Ranks may differ in it.
	Logger *slog.Logger
	// Recipe of the FP8 parameters: default E4M3 with per-tensor current scaling.
	Recipe fp8.Recipe
	// GradType of the gradient buffers: BFloat16 (default) or Float32.
	GradType buffer.DType
	// FirstMomentType and SecondMomentType choose each moment's storage:
	// MomentFloat32 (default), MomentBFloat16 or MomentFP8 (E4M3 codes with
	// a float32 scale per block of MomentBlock elements; the second moment
	// is stored as its square root). The first is Adam's m and SGD's
	// momentum; SGD has no second moment, so leave SecondMomentType zero.
	// FP8 moments need block-aligned layouts (see MomentBlock).
	FirstMomentType, SecondMomentType MomentDType
	// MomentBlock is the block of FP8 moments in elements: 32, 64 or 128
	// (default). It must divide Layout.Align; with FP8 moments,
	// Layout.HighPrecisionAlign defaults to it.
	MomentBlock int
	// HighPrecisionType of gathered high-precision parameters: BFloat16
	// (default) or Float32.
	HighPrecisionType buffer.DType
	// Layout options of the buckets.
	Layout shard.Options
	// LossScaler, when set, enables dynamic loss scaling.
	LossScaler *LossScaler
	// MicroBatches is the number of backward passes whose gradients a step
	// accumulates when they are declared with GradReady: a bucket's
	// reduce-scatter starts at the MicroBatches-th GradReady of its last
	// parameter (0: 1, no accumulation). Step without GradReady ignores it.
	MicroBatches int
	// ShardedGradients (ZeRO-2) replaces the full-size gradient buffer of
	// every bucket by a pool of GradBuffers bucket-sized buffers, lent to
	// the buckets the backward pass writes (Grad, SetGrad) and
	// reduce-scattered as soon as the bucket is declared ready (GradReady),
	// then reused; each rank keeps only its shard of the reduced gradient,
	// in GradType (BFloat16 by default; Float32 makes it an FP32
	// accumulator), which the norm and the update read. Every parameter
	// must then be declared ready MicroBatches times per step, Step or
	// StepAsync alike. With MicroBatches > 1 the reduce-scatter runs for
	// every micro-batch (wire bytes x MicroBatches) and the reduced shards
	// are added in micro-batch order, rounded to GradType (the backend must
	// be a GradAccumulator: the CPU and CUDA backends are). Each bucket's
	// reduce-scatter carries its Tag (GradTag), so collective/fp8grad's
	// error feedback keeps one residual per bucket although the pool's
	// buffers serve several buckets.
	ShardedGradients bool
	// GradBuffers is the number of buffers of the ShardedGradients pool
	// (default 2). Each holds the largest bucket's gradient.
	GradBuffers int
	// ExternalGradients: the caller lends the gradient buffers for each
	// step (BindGrads) and New allocates none. A framework whose backward
	// pass can write every bucket's gradient in the layout's order saves
	// the optimizer's copy (GradType bytes per parameter) and the copies
	// into it. Not with ShardedGradients.
	ExternalGradients bool
	// Store, when set (a *rendezvous.Store is one), is where ranks first
	// compare the fingerprint of their layout and configuration at start-up,
	// before any collective runs. Whether or not it is set, New then
	// exchanges the fields through the communicator, so that a mismatch
	// names the rank and the fields that differ.
	Store Agreer
}

// Agreer checks that every rank holds the same value under key, returning
// an error naming the ranks that differ.
type Agreer interface {
	CheckAgreement(ctx context.Context, key, value string) error
}

func (c *Config) setDefaults() {
	if c.Rule == RuleNone {
		c.Rule = RuleAdamW
	}
	if c.LR == nil {
		c.LR = Constant(1e-3)
	}
	if len(c.Groups) == 0 {
		c.Groups = []Group{{Name: "default", LR: c.LR, WeightDecay: c.WeightDecay}}
	}
	if c.Beta1 == 0 {
		c.Beta1 = 0.9
	}
	if c.Beta2 == 0 {
		c.Beta2 = 0.999
	}
	if c.Eps == 0 {
		c.Eps = 1e-8
	}
	if c.Recipe.Format == 0 {
		c.Recipe.Format = fp8.E4M3
	}
	if c.Recipe.Scaling == 0 {
		c.Recipe.Scaling = fp8.TensorCurrent
	}
	if c.Recipe.Scaling == fp8.TensorDelayed && c.Recipe.HistoryLen == 0 {
		c.Recipe.HistoryLen = 1024
	}
	if c.GradType == 0 {
		c.GradType = buffer.BFloat16
	}
	c.momentDefaults()
	if c.HighPrecisionType == 0 {
		c.HighPrecisionType = buffer.BFloat16
	}
	if c.MicroBatches == 0 {
		c.MicroBatches = 1
	}
	if c.ShardedGradients && c.GradBuffers == 0 {
		c.GradBuffers = 2
	}
}

func (c *Config) validate(params []Param) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("optimizer: %s: %w", fmt.Sprintf(format, args...), ErrConfig)
	}
	if !c.Rule.Valid() {
		return bad("unknown update rule %d", c.Rule)
	}
	if err := c.Recipe.Validate(); err != nil {
		return fmt.Errorf("optimizer: recipe: %v: %w", err, ErrConfig)
	}
	for _, t := range []struct {
		name string
		dt   buffer.DType
	}{{"GradType", c.GradType}, {"HighPrecisionType", c.HighPrecisionType}} {
		if t.dt != buffer.BFloat16 && t.dt != buffer.Float32 {
			return bad("%s must be bfloat16 or float32, not %s", t.name, t.dt)
		}
	}
	if err := c.checkMoments(); err != nil {
		return err
	}
	if c.Beta1 < 0 || c.Beta1 >= 1 || c.Beta2 < 0 || c.Beta2 >= 1 || c.Eps <= 0 {
		return bad("betas must lie in [0, 1) and eps be positive (beta1 %g, beta2 %g, eps %g)", c.Beta1, c.Beta2, c.Eps)
	}
	if err := c.checkHyper(); err != nil {
		return err
	}
	if c.MicroBatches < 0 {
		return bad("MicroBatches %d is negative", c.MicroBatches)
	}
	if c.GradBuffers < 0 || (c.GradBuffers > 0 && !c.ShardedGradients) {
		return bad("GradBuffers %d needs ShardedGradients and must be positive", c.GradBuffers)
	}
	if c.ExternalGradients && c.ShardedGradients {
		return bad("ExternalGradients and ShardedGradients exclude each other (the sharded gradients' pool is the optimizer's own)")
	}
	if c.Momentum < 0 || c.MaxGradNorm < 0 {
		return bad("momentum %g and max gradient norm %g must not be negative", c.Momentum, c.MaxGradNorm)
	}
	for i, g := range c.Groups {
		if g.LR == nil {
			return bad("group %d (%s) has no learning rate schedule", i, g.Name)
		}
		if g.WeightDecay < 0 {
			return bad("group %d (%s) has negative weight decay %g", i, g.Name, g.WeightDecay)
		}
	}
	for _, p := range params {
		if p.Group < 0 || p.Group >= len(c.Groups) {
			return bad("parameter %q is in group %d, but there are %d groups", p.Name, p.Group, len(c.Groups))
		}
	}
	if c.Recipe.LocalBlocks() {
		_, cols := c.Recipe.Block()
		align := c.Layout.Align
		if align == 0 {
			align = shard.DefaultAlign
		}
		if align%cols != 0 {
			return bad("layout alignment %d is not a multiple of the recipe's block of %d elements", align, cols)
		}
	}
	if c.LossScaler != nil {
		if err := c.LossScaler.init(); err != nil {
			return err
		}
	}
	return nil
}

// fields lists the configuration that every rank must share.
func (c *Config) fields() []shard.Field {
	fs := []shard.Field{
		{Name: "update rule", Value: fmt.Sprint(c.Rule)},
		{Name: "recipe", Value: c.Recipe.String()},
		{Name: "gradient type", Value: c.GradType.String()},
		{Name: "moment type", Value: c.uniformMomentType().String()},
		{Name: "high-precision type", Value: c.HighPrecisionType.String()},
		{Name: "betas and eps", Value: fmt.Sprint(c.Beta1, c.Beta2, c.Eps)},
		{Name: "momentum", Value: fmt.Sprint(c.Momentum)},
		{Name: "max gradient norm", Value: fmt.Sprint(c.MaxGradNorm)},
		{Name: "loss scaling", Value: fmt.Sprint(c.LossScaler != nil)},
		{Name: "micro-batches", Value: fmt.Sprint(c.MicroBatches)},
	}
	fs = append(fs, c.momentFields()...)
	if c.ShardedGradients {
		fs = append(fs, shard.Field{Name: "sharded gradients", Value: fmt.Sprint(c.GradBuffers, " buffers")})
	}
	for i, g := range c.Groups {
		fs = append(fs, shard.Field{Name: fmt.Sprintf("group %d", i), Value: fmt.Sprintf("%s lr=%s wd=%g", g.Name, g.LR, g.WeightDecay)})
	}
	return fs
}
