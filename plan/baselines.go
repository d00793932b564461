package plan

import (
	"strconv"
	"strings"
)

// Baseline is a configuration users weigh against distopt, with its
// published bytes per parameter per rank, split into parts, as a function
// of the data-parallel size d.
type Baseline struct {
	Name string
	// Bytes per parameter of each part: the weights every rank holds for
	// the forward and backward passes, the gradients, optimizer state every
	// rank holds whole (a master copy and moments, unsharded), and
	// optimizer state sharded over the d ranks (divided by d).
	Weights, Grads, State, Sharded float64
	// Distopt marks distopt's own configurations, whose exact figures
	// (scales and padding included) come from optimizer.PredictMemory.
	Distopt bool
}

// BytesPerParam evaluates the baseline at data-parallel size d.
func (b Baseline) BytesPerParam(d int) float64 {
	return b.Weights + b.Grads + b.State + b.Sharded/float64(d)
}

// Formula writes the per-parameter cost in words: "2 + 4 + 12/d".
func (b Baseline) Formula() string {
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	terms := []string{g(b.Weights), g(b.Grads)}
	if b.State != 0 {
		terms = append(terms, g(b.State))
	}
	if b.Sharded != 0 {
		terms = append(terms, g(b.Sharded)+"/d")
	}
	return strings.Join(terms, " + ")
}

// Baselines are the configurations of the comparison table.
//
// Without sharding: plain FP32 Adam (weights, gradients, two moments: 16
// bytes) and the classic mixed-precision optimizer (BF16 weights and
// gradients, an FP32 master clone and two FP32 moments: 2 + 2 + 12).
//
// Megatron-LM's distributed optimizer (--use-distributed-optimizer), as its
// documentation gives it (the Megatron Core developer guide, "Distributed
// Optimizer": "bf16 parameters, fp32 gradients: 6 + 12/d"): BF16 parameters (2 bytes) and the FP32
// main-gradient buffer (4 bytes, --accumulate-allreduce-grads-in-fp32, the
// default with --bf16) on every rank; the FP32 main parameters and the two
// FP32 Adam moments (12 bytes) sharded. Its variants:
//
//   - --fp8-param-gather: "keep the compute param in fp8 (do not use any
//     other intermediate dtype) and perform the param all-gather in fp8"
//     (its help text): the resident weights take 1 byte instead of 2,
//     5 + 12/d. The gradients stay FP32.
//   - --use-precision-aware-optimizer --exp-avg-dtype bf16
//     --exp-avg-sq-dtype bf16: the moments are stored in BF16 ("used for
//     storing the optimizer state in memory", its help text) with FP32
//     main parameters (--main-params-dtype fp32, the default): 4 + 2 + 2
//     sharded bytes, 6 + 8/d, and 5 + 8/d with --fp8-param-gather.
//
// distopt: FP8 parameters, BF16 gradients, FP32 master and FP32 or BF16
// moments sharded (1 + 2 + 12/d and 1 + 2 + 8/d).
//
// Not counted, for any of them: scales, padding and scratch (PredictMemory
// reports them for distopt), the transposed FP8 weights Transformer Engine
// may keep for the backward pass, activations, and the framework's
// allocator caches.
var Baselines = []Baseline{
	{Name: "FP32 Adam, unsharded", Weights: 4, Grads: 4, State: 8},
	{Name: "BF16 + FP32 master clone", Weights: 2, Grads: 2, State: 12},
	{Name: "Megatron BF16 distributed optimizer", Weights: 2, Grads: 4, Sharded: 12},
	{Name: "Megatron, BF16 moments", Weights: 2, Grads: 4, Sharded: 8},
	{Name: "Megatron --fp8-param-gather", Weights: 1, Grads: 4, Sharded: 12},
	{Name: "Megatron --fp8-param-gather, BF16 moments", Weights: 1, Grads: 4, Sharded: 8},
	{Name: "distopt FP8, FP32 moments", Weights: 1, Grads: 2, Sharded: 12, Distopt: true},
	{Name: "distopt FP8, BF16 moments", Weights: 1, Grads: 2, Sharded: 8, Distopt: true},
}
