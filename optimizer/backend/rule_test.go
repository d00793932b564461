package backend

import (
	"fmt"
	"testing"
)

// TestRuleFactors checks that each rule hands the kernels the factor of
// its own name: SetFactors fills StepSize and the rule's second factor, and
// Factors returns them, leaving the other rule's field alone.
func TestRuleFactors(t *testing.T) {
	p := Params{Beta1: 0.5, Beta2: 0.75, Eps: 1e-8, Momentum: 0.9}
	for _, c := range []struct {
		r         Rule
		field     func(s *Segment) float32 // the rule's second factor
		other     func(s *Segment) float32 // a field the rule must not set
		wantSteps float32                  // StepSize at step 1, lr 0.25
	}{
		{RuleAdamW, func(s *Segment) float32 { return s.Shrink }, func(s *Segment) float32 { return s.WeightDecay }, 0.25 / (1 - 0.5)},
		{RuleSGD, func(s *Segment) float32 { return s.WeightDecay }, func(s *Segment) float32 { return s.Shrink }, 0.25},
	} {
		s := Segment{Shrink: -7, WeightDecay: -7}
		c.r.SetFactors(&s, p, 1, 0.25, 0.125)
		step, second := s.Factors(c.r)
		if step != c.wantSteps || s.StepSize != c.wantSteps || second != c.field(&s) || c.other(&s) != -7 {
			t.Errorf("%v: step %g second %g (segment %+v), want step %g and the rule's own field", c.r, step, second, s, c.wantSteps)
		}
		if !c.r.Valid() || len(c.r.Moments()) == 0 {
			t.Errorf("%v: valid %t, moments %v", c.r, c.r.Valid(), c.r.Moments())
		}
	}
	if RuleNone.Valid() || Rule(len(rules)).Valid() || Rule(len(rules)).String() != fmt.Sprintf("Rule(%d)", len(rules)) {
		t.Errorf("RuleNone or Rule(%d) counted valid, or misnamed %q", len(rules), Rule(len(rules)))
	}
	var s Segment
	RuleNone.SetFactors(&s, p, 1, 0.25, 0.125)
	if s != (Segment{}) || RuleNone.Hyper(p, 1, 1) != (Hyper{}) {
		t.Errorf("RuleNone sets factors %+v or scalars %+v", s, RuleNone.Hyper(p, 1, 1))
	}
}
