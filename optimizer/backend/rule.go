package backend

import (
	"fmt"
	"math"
)

// Rule is the update rule of a step. Its value is what the kernels receive
// (update.cu's enum Rule; optimizer/gpu's tests check them).
type Rule uint8

const (
	// RuleNone leaves master and moments unchanged (the initial cast, and the
	// cast after a checkpoint load).
	RuleNone Rule = iota
	// RuleAdamW is AdamWElem.
	RuleAdamW
	// RuleSGD is SGDElem.
	RuleSGD
)

// Params are the hyperparameters of the rules that a configuration fixes
// for a whole run (optimizer.Config's).
type Params struct {
	Beta1, Beta2, Eps float64 // AdamW
	Momentum          float64 // SGD
}

// ruleDef is the one definition of an update rule's facts: its name, the
// moments it keeps, its per-step scalars and its per-parameter factors. The
// optimizer, its memory planner and checkpoints read them through Rule's
// methods; the arithmetic itself is the rule's Elem function (arith.go) and
// its loops in the backends (optimizer/cpu_rules.go,
// internal/kernels/update.cu).
type ruleDef struct {
	// name is Rule.String: the configuration fingerprint and the rule a
	// checkpoint records.
	name string
	// moments names the moment buffers, stored in UpdateArgs.M then V: the
	// suffixes of checkpoint tensors and the memory report's rows.
	moments []string
	// hyper returns the per-step scalars of step (counted from 1) with the
	// gradient scale gs (clip coefficient / loss scale).
	hyper func(p Params, step int, gs float64) Hyper
	// factors returns the rule's per-parameter factors for step, from the
	// parameter's learning rate lr and weight decay wd (0 when exempt).
	factors func(p Params, step int, lr, wd float64) Factors
	// second returns the factor of f the kernels take beside StepSize.
	second func(f Factors) float32
}

// rules holds the definition of every Rule, indexed by its value.
var rules = [...]ruleDef{
	RuleNone: {name: "none"},
	RuleAdamW: {
		name:    "adamw",
		moments: []string{"m", "v"},
		hyper: func(p Params, step int, gs float64) Hyper {
			return Hyper{
				GradScale:       float32(gs),
				Beta1:           float32(p.Beta1),
				Beta2:           float32(p.Beta2),
				OneMinusBeta1:   float32(1 - p.Beta1),
				OneMinusBeta2:   float32(1 - p.Beta2),
				Eps:             float32(p.Eps),
				SqrtVCorrection: float32(1 / math.Sqrt(1-math.Pow(p.Beta2, float64(step)))),
			}
		},
		factors: func(p Params, step int, lr, wd float64) Factors {
			return Factors{StepSize: float32(lr / (1 - math.Pow(p.Beta1, float64(step)))), Shrink: float32(1 - lr*wd)}
		},
		second: func(f Factors) float32 { return f.Shrink },
	},
	RuleSGD: {
		name:    "sgd",
		moments: []string{"m"},
		hyper: func(p Params, _ int, gs float64) Hyper {
			return Hyper{GradScale: float32(gs), Momentum: float32(p.Momentum)}
		},
		factors: func(_ Params, _ int, lr, wd float64) Factors {
			return Factors{StepSize: float32(lr), WeightDecay: float32(wd)}
		},
		second: func(f Factors) float32 { return f.WeightDecay },
	},
}

// def returns r's definition; it panics for a value that is not a Rule
// constant.
func (r Rule) def() *ruleDef {
	if int(r) >= len(rules) {
		panic(fmt.Sprintf("backend: update rule %d", r))
	}
	return &rules[r]
}

// Valid reports whether r is a rule a configuration may name (not RuleNone).
func (r Rule) Valid() bool { return r != RuleNone && int(r) < len(rules) }

// String returns the rule's name ("adamw", "sgd", "none"), or "Rule(n)".
func (r Rule) String() string {
	if int(r) >= len(rules) {
		return fmt.Sprintf("Rule(%d)", uint8(r))
	}
	return rules[r].name
}

// Moments returns the names of the moment buffers the rule keeps per
// element, in the order of UpdateArgs.M and V ("m", "v" for AdamW, "m" for
// SGD's momentum; none for RuleNone). Checkpoints and memory reports name
// them so.
func (r Rule) Moments() []string {
	return append([]string(nil), r.def().moments...)
}

// Hyper returns the rule's per-step scalars for step (counted from 1) with
// gradient scale gs (clip coefficient / loss scale).
func (r Rule) Hyper(p Params, step int, gs float64) Hyper {
	if f := r.def().hyper; f != nil {
		return f(p, step, gs)
	}
	return Hyper{}
}

// Factors returns the rule's per-parameter factors for step, from the
// parameter's learning rate lr and weight decay wd (0 when the parameter is
// exempt); RuleNone's are all zero.
func (r Rule) Factors(p Params, step int, lr, wd float64) Factors {
	if f := r.def().factors; f != nil {
		return f(p, step, lr, wd)
	}
	return Factors{}
}

// Pair returns the two factors of f as the kernels receive them for rule
// r: the step size, then the rule's second factor (AdamW: Shrink; SGD:
// WeightDecay; RuleNone: 0).
func (f Factors) Pair(r Rule) (step, second float32) {
	if g := r.def().second; g != nil {
		return f.StepSize, g(f)
	}
	return f.StepSize, 0
}
