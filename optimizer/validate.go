package optimizer

import (
	"fmt"
	"math"
)

// Bounds of the learning rate a schedule may yield. They are sanity bounds,
// far above any rate that trains: AdamW moves each weight by about lr per
// step, so a rate past MaxLRAdamW only destroys the weights; SGD's step is
// lr times the gradient, and MaxLRSGD leaves room for very large-batch
// recipes.
const (
	MaxLRAdamW = 10.0
	MaxLRSGD   = 1e4
)

// MinEps is the smallest AdamW Eps: the smallest normal float32, 2^-126.
//
// The update divides m by d = sqrt(v)*rbc2 + Eps, computed in float32, so
// d >= float32(Eps). An Eps that rounds to 0 in float32 (1e-50, say), or a
// subnormal one that a device flushes to zero, lets an element whose
// gradient was always 0 compute 0/0 = NaN. From MinEps on, d > 0.
const MinEps = 0x1p-126

// checkMomentBounds checks the closed-form bounds under which the moments
// of a rule stay finite for bounded gradients (see MinEps and
// Config.Momentum). The error names the field and the bound.
//
// AdamW: with Beta1^2 < Beta2, Cauchy-Schwarz bounds the first moment by
// the second: |m| <= C*sqrt(v), C = (1-Beta1)/sqrt((1-Beta2)(1-Beta1^2/Beta2)).
// When v underflows float32 (v < 2^-126), |m| < C*2^-63, so
// |m/d| <= C*2^-63/MinEps = C*2^63 stays finite. With Beta1^2 >= Beta2, m
// outlives v: after v underflows to 0, m/Eps can overflow.
//
// SGD: buf = Momentum*buf + g is bounded by max|g|/(1-Momentum) only when
// Momentum, as the float32 the update uses, is below 1.
func (c *Config) checkMomentBounds() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("optimizer: %s: %w", fmt.Sprintf(format, args...), ErrConfig)
	}
	switch c.Rule {
	case RuleAdamW:
		if c.Eps < MinEps {
			return bad("Eps is %g, below MinEps (%g, the smallest normal float32): the update would divide 0 by 0", c.Eps, MinEps)
		}
		if c.Beta1*c.Beta1 >= c.Beta2 {
			return bad("Beta1 %g squared is not below Beta2 %g: the first moment would outlive the second and m/Eps overflow", c.Beta1, c.Beta2)
		}
	case RuleSGD:
		if float32(c.Momentum) >= 1 {
			return bad("Momentum is %g, want below 1 (as a float32): the momentum buffer would grow without bound", c.Momentum)
		}
	}
	return nil
}

// checkHyper checks the scalar hyperparameters of c (defaults set): every
// one finite and in range, each group's weight decay finite, and each
// group's schedule yielding a valid rate at step 1 (and, for WarmupCosine,
// having valid fields). The error wraps ErrConfig and names the field.
func (c *Config) checkHyper() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("optimizer: %s: %w", fmt.Sprintf(format, args...), ErrConfig)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"Beta1", c.Beta1}, {"Beta2", c.Beta2}, {"Eps", c.Eps}, {"Momentum", c.Momentum}, {"MaxGradNorm", c.MaxGradNorm}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return bad("%s is %g, want a finite value", f.name, f.v)
		}
	}
	if err := c.checkMomentBounds(); err != nil {
		return err
	}
	for i, g := range c.Groups {
		if math.IsNaN(g.WeightDecay) || math.IsInf(g.WeightDecay, 0) {
			return bad("group %d (%s): weight decay is %g, want a finite value >= 0", i, g.Name, g.WeightDecay)
		}
		if g.LR == nil {
			continue // validate names it
		}
		if wc, ok := g.LR.(WarmupCosine); ok {
			if err := c.checkLR(i, "peak", wc.Peak); err != nil {
				return err
			}
			if err := c.checkLR(i, "min", wc.Min); err != nil {
				return err
			}
			if wc.Warmup < 0 || wc.Total < 0 {
				return bad("group %d (%s): schedule %s has a negative step count", i, g.Name, wc)
			}
		}
		if err := c.checkLR(i, "step 1", g.LR.LR(1)); err != nil {
			return err
		}
	}
	return nil
}

// checkLRs checks the rate every group's schedule yields at step t: finite,
// >= 0, at most MaxLRAdamW (AdamW) or MaxLRSGD (SGD), and, for AdamW, small
// enough that decay lr*WeightDecay stays <= 1 (past it the weights would
// flip sign); for SGD, lr*WeightDecay <= 2*(1+Momentum): the decay alone
// makes w' = w - lr*(wd*w + Momentum*buf), whose two roots
// z^2 - (1+Momentum-lr*wd)z + Momentum = 0 lie in the unit circle just
// when 0 <= lr*wd <= 2*(1+Momentum) (for Momentum < 1). The optimizer calls it when its configuration is set and
// before every step; the error wraps ErrConfig and names the group, the
// step, the value and the schedule.
func (c *Config) checkLRs(t int) error {
	for i, g := range c.Groups {
		if err := c.checkLR(i, fmt.Sprintf("step %d", t), g.LR.LR(t)); err != nil {
			return err
		}
	}
	return nil
}

// checkLR checks one rate lr of group i; what says where it comes from.
func (c *Config) checkLR(i int, what string, lr float64) error {
	g := c.Groups[i]
	limit := MaxLRAdamW
	if c.Rule == RuleSGD {
		limit = MaxLRSGD
	}
	var why string
	switch {
	case math.IsNaN(lr) || math.IsInf(lr, 0):
		why = "is not finite"
	case lr < 0:
		why = "is negative"
	case lr > limit:
		why = fmt.Sprintf("exceeds %g, the bound of %s", limit, c.Rule)
	case c.Rule == RuleAdamW && lr*g.WeightDecay > 1:
		why = fmt.Sprintf("times the weight decay %g exceeds 1", g.WeightDecay)
	case c.Rule == RuleSGD && lr*g.WeightDecay > 2*(1+c.Momentum):
		why = fmt.Sprintf("times the weight decay %g exceeds 2*(1+Momentum) = %g, where the decay alone makes the weights oscillate ever wider", g.WeightDecay, 2*(1+c.Momentum))
	default:
		return nil
	}
	return fmt.Errorf("optimizer: group %d (%s): learning rate (%s) %g of schedule %s %s: %w", i, g.Name, what, lr, g.LR, why, ErrConfig)
}

// checkInitial checks the initial values vals of parameter name, which
// start at element offset: every one must be finite. The error wraps
// ErrConfig and names the first bad element.
func checkInitial(name string, offset int, vals []float32) error {
	for i, v := range vals {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("optimizer: initial value of %q: element %d is %g, want a finite value: %w", name, offset+i, v, ErrConfig)
		}
	}
	return nil
}
