package optimizer

import (
	"fmt"
	"strings"
)

// Baseline is a configuration users weigh against distopt, with its
// published bytes per parameter per rank as a function of the
// data-parallel size d.
type Baseline struct {
	Name string
	// Formula is the per-parameter cost in words, e.g. "2 + 4 + 12/d".
	Formula string
	// Fixed and Sharded give bytes/param = Fixed + Sharded/d.
	Fixed, Sharded float64
}

// BytesPerParam evaluates the baseline at data-parallel size d.
func (b Baseline) BytesPerParam(d int) float64 { return b.Fixed + b.Sharded/float64(d) }

// Baselines are the configurations of the comparison table: plain FP32 Adam
// (weights, gradients, two moments: 16 bytes); the classic mixed-precision
// optimizer (BF16 weights and gradients plus an FP32 master clone and two
// moments: 2 + 2 + 12); Megatron's distributed optimizer (BF16 weights, FP32
// gradient buffer, FP32 master and moments sharded: 6 + 12/d); distopt with
// FP8 parameters, BF16 gradients and FP32 or BF16 moments (1 + 2 + 12/d and
// 1 + 2 + 8/d). Scales, padding and scratch come on top and are reported by
// PredictMemory for distopt.
var Baselines = []Baseline{
	{Name: "FP32 Adam, unsharded", Formula: "4 + 4 + 8", Fixed: 16},
	{Name: "BF16 + FP32 master clone", Formula: "2 + 2 + 12", Fixed: 16},
	{Name: "Megatron BF16 distributed optimizer", Formula: "6 + 12/d", Fixed: 6, Sharded: 12},
	{Name: "distopt FP8, FP32 moments", Formula: "1 + 2 + 12/d", Fixed: 3, Sharded: 12},
	{Name: "distopt FP8, BF16 moments", Formula: "1 + 2 + 8/d", Fixed: 3, Sharded: 8},
}

// ComparisonTable formats, for a model of n parameters and each d in ds,
// the per-rank GiB of every baseline.
func ComparisonTable(n int64, ds []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-38s %-14s", "configuration (GiB per rank)", "bytes/param")
	for _, d := range ds {
		fmt.Fprintf(&b, " %9s", fmt.Sprintf("d=%d", d))
	}
	b.WriteString("\n")
	for _, bl := range Baselines {
		fmt.Fprintf(&b, "%-38s %-14s", bl.Name, bl.Formula)
		for _, d := range ds {
			fmt.Fprintf(&b, " %9.2f", bl.BytesPerParam(d)*float64(n)/(1<<30))
		}
		b.WriteString("\n")
	}
	return b.String()
}
