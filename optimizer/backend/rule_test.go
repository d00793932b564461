package backend

import (
	"fmt"
	"testing"
)

// TestRuleFactors checks that each rule hands the kernels the factor of
// its own name: Factors fills StepSize and the rule's second factor, and
// Pair returns them; the other rule's field stays zero.
func TestRuleFactors(t *testing.T) {
	p := Params{Beta1: 0.5, Beta2: 0.75, Eps: 1e-8, Momentum: 0.9}
	for _, c := range []struct {
		r         Rule
		field     func(f Factors) float32 // the rule's second factor
		other     func(f Factors) float32 // a field the rule must not set
		wantSteps float32                 // StepSize at step 1, lr 0.25
	}{
		{RuleAdamW, func(f Factors) float32 { return f.Shrink }, func(f Factors) float32 { return f.WeightDecay }, 0.25 / (1 - 0.5)},
		{RuleSGD, func(f Factors) float32 { return f.WeightDecay }, func(f Factors) float32 { return f.Shrink }, 0.25},
	} {
		f := c.r.Factors(p, 1, 0.25, 0.125)
		step, second := f.Pair(c.r)
		if step != c.wantSteps || f.StepSize != c.wantSteps || second != c.field(f) || second == 0 || c.other(f) != 0 {
			t.Errorf("%v: step %g second %g (factors %+v), want step %g and the rule's own field", c.r, step, second, f, c.wantSteps)
		}
		if !c.r.Valid() || len(c.r.Moments()) == 0 {
			t.Errorf("%v: valid %t, moments %v", c.r, c.r.Valid(), c.r.Moments())
		}
	}
	if RuleNone.Valid() || Rule(len(rules)).Valid() || Rule(len(rules)).String() != fmt.Sprintf("Rule(%d)", len(rules)) {
		t.Errorf("RuleNone or Rule(%d) counted valid, or misnamed %q", len(rules), Rule(len(rules)))
	}
	if f := RuleNone.Factors(p, 1, 0.25, 0.125); f != (Factors{}) || RuleNone.Hyper(p, 1, 1) != (Hyper{}) {
		t.Errorf("RuleNone sets factors %+v or scalars %+v", f, RuleNone.Hyper(p, 1, 1))
	}
}
