package optimizer

import "github.com/distopt/distopt/optimizer/backend"

// Rule is the update rule of a step: RuleAdamW or RuleSGD in a Config.
// Package optimizer/backend defines each rule.
type Rule = backend.Rule

// The update rules.
const (
	// RuleNone leaves master and moments unchanged: the initial cast, and
	// the cast after a checkpoint load. A Config with it takes RuleAdamW.
	RuleNone = backend.RuleNone
	// RuleAdamW is AdamW with decoupled weight decay (backend.AdamWElem).
	RuleAdamW = backend.RuleAdamW
	// RuleSGD is SGD with momentum and coupled weight decay (backend.SGDElem).
	RuleSGD = backend.RuleSGD
)
