package plan_test

import (
	"fmt"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/plan"
)

// Example looks up a preset and a GPU and prints the bytes per rank of
// Megatron's distributed optimizer with FP8 parameters at 8 ranks.
func Example() {
	p, err := plan.LookupPreset("Llama-3-8B")
	if err != nil {
		panic(err)
	}
	gpu, _ := plan.LookupGPU("h100")
	n := p.Model.NumParams()
	b := plan.Baselines[4]
	fmt.Println(p.Model.Describe())
	fmt.Printf("%d parameters; %s: %s bytes each, %.1f GiB per rank at d=8 of the %s's %.1f GiB\n",
		n, b.Name, b.Formula(), b.BytesPerParam(8)*float64(n)/(1<<30), gpu.Name, float64(gpu.Bytes)/(1<<30))
	// Output:
	// Llama-style, 32 layers, hidden 4096, SwiGLU FFN 14336, grouped-query attention, 32 heads, 8 KV heads, vocabulary 128256, untied head
	// 8030261248 parameters; Megatron --fp8-param-gather: 1 + 4 + 12/d bytes each, 48.6 GiB per rank at d=8 of the h100-80gb's 79.6 GiB
}

func ExampleParseCount() {
	for _, s := range []string{"70B", "70e9", "1.3B", "350M"} {
		n, _ := plan.ParseCount(s)
		fmt.Println(s, n)
	}
	// Output:
	// 70B 70000000000
	// 70e9 70000000000
	// 1.3B 1300000000
	// 350M 350000000
}

// The optimizer step of the 1.3B GPT on 64 H200s (8 nodes of 8), flat and
// in groups of a node: the all-gather stays in the node, and the network
// carries only the all-reduce of each group's shard.
func ExamplePredictStep() {
	m, err := plan.LookupCluster("h200")
	if err != nil {
		panic(err)
	}
	s := plan.ShapeOf(plan.GPT13B.Params(), 22, fp8.TensorCurrent)
	for _, g := range []int{64, 8} {
		p, err := plan.PredictStep(m, s, 64, g)
		if err != nil {
			panic(err)
		}
		fmt.Printf("groups of %2d: reduce-scatter %5.1f ms, all-gather %4.1f ms\n", g, p.ReduceScatter.Seconds()*1e3, p.AllGather.Seconds()*1e3)
	}
	// Output:
	// groups of 64: reduce-scatter  57.7 ms, all-gather 29.7 ms
	// groups of  8: reduce-scatter  22.4 ms, all-gather  5.0 ms
}
