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
// flip sign). The optimizer calls it when its configuration is set and
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
