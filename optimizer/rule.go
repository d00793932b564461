package optimizer

import (
	"fmt"
	"math"
)

// ruleDef is the one definition of an update rule's facts: its name, the
// moments it keeps, its per-step scalars and its per-parameter factors. The
// optimizer, the memory planner (PredictMemory, Report) and checkpoints
// (through Rule.Moments and Rule.String) read them from here; the
// arithmetic itself is the rule's Elem function in rules.go, and its loops
// in the backends (cpu_rules.go, internal/kernels/update.cu).
type ruleDef struct {
	// name is Rule.String: the configuration fingerprint and the rule a
	// checkpoint records.
	name string
	// moments names the moment buffers, stored in UpdateArgs.M then V: the
	// suffixes of checkpoint tensors and the memory report's rows.
	moments []string
	// hyper returns the per-step scalars of step (counted from 1) with the
	// gradient scale gs (clip coefficient / loss scale).
	hyper func(c *Config, step int, gs float64) Hyper
	// factors sets the rule's per-parameter factors of s for step, from the
	// parameter's learning rate lr and weight decay wd (0 when exempt).
	factors func(s *Segment, c *Config, step int, lr, wd float64)
	// second returns the factor of s the kernels take beside StepSize.
	second func(s *Segment) float32
}

// rules holds the definition of every Rule, indexed by its value.
var rules = [...]ruleDef{
	RuleNone: {name: "none"},
	RuleAdamW: {
		name:    "adamw",
		moments: []string{"m", "v"},
		hyper: func(c *Config, step int, gs float64) Hyper {
			return Hyper{
				GradScale:     float32(gs),
				Beta1:         float32(c.Beta1),
				Beta2:         float32(c.Beta2),
				OneMinusBeta1: float32(1 - c.Beta1),
				OneMinusBeta2: float32(1 - c.Beta2),
				Eps:           float32(c.Eps),
				RBC2:          float32(1 / math.Sqrt(1-math.Pow(c.Beta2, float64(step)))),
			}
		},
		factors: func(s *Segment, c *Config, step int, lr, wd float64) {
			s.StepSize = float32(lr / (1 - math.Pow(c.Beta1, float64(step))))
			s.Shrink = float32(1 - lr*wd)
		},
		second: func(s *Segment) float32 { return s.Shrink },
	},
	RuleSGD: {
		name:    "sgd",
		moments: []string{"m"},
		hyper: func(c *Config, _ int, gs float64) Hyper {
			return Hyper{GradScale: float32(gs), Momentum: float32(c.Momentum)}
		},
		factors: func(s *Segment, _ *Config, _ int, lr, wd float64) {
			s.StepSize = float32(lr)
			s.WeightDecay = float32(wd)
		},
		second: func(s *Segment) float32 { return s.WeightDecay },
	},
}

// def returns r's definition; it panics for a value that is not a Rule
// constant (Config validation refuses those first).
func (r Rule) def() *ruleDef {
	if int(r) >= len(rules) {
		panic(fmt.Sprintf("optimizer: update rule %d", r))
	}
	return &rules[r]
}

// valid reports whether r is a rule a Config may name.
func (r Rule) valid() bool { return r != RuleNone && int(r) < len(rules) }

// String returns the rule's name ("adamw", "sgd", "none"), or "Rule(n)".
func (r Rule) String() string {
	if int(r) >= len(rules) {
		return fmt.Sprintf("Rule(%d)", uint8(r))
	}
	return rules[r].name
}

// Moments returns the names of the moment buffers the rule keeps per
// element, in the order of UpdateArgs.M and V ("m", "v" for AdamW, "m" for
// SGD's momentum; none for RuleNone). Checkpoints store them under these
// names.
func (r Rule) Moments() []string {
	return append([]string(nil), r.def().moments...)
}

// Factors (for backend authors) returns the two per-parameter factors of s as the kernels
// receive them for rule r: the step size, then the rule's second factor
// (AdamW: Shrink; SGD: WeightDecay; RuleNone: 0).
func (s *Segment) Factors(r Rule) (step, second float32) {
	if f := r.def().second; f != nil {
		return s.StepSize, f(s)
	}
	return s.StepSize, 0
}
