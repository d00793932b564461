package optimizer_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// Two in-process ranks share one matrix (gathered in FP8) and one bias
// (gathered in BF16); each writes its own gradient, and a step averages
// them, updates each rank's shard with AdamW and gathers the result.
func Example() {
	params := []optimizer.Param{
		{Name: "w", Shape: []int{2, 3}},
		{Name: "b", Shape: []int{3}, HighPrecision: true, NoDecay: true},
	}
	init := optimizer.FromMap(map[string][]float32{
		"w": {0.5, -0.25, 1, 2, -1, 0.125},
		"b": {0, 0, 0},
	})
	cfg := optimizer.Config{LR: optimizer.Constant(0.1), Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}}
	comms := inproc.Communicators(2)
	out := make([]string, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			ctx := context.Background()
			o, err := optimizer.New(ctx, comms[r], cpu.New(1), params, init, cfg)
			if err != nil {
				out[r] = err.Error()
				return
			}
			defer o.Close()
			sign := float32(1 - 2*r) // the ranks' gradients differ; their mean is 1, or 0 where they cancel
			o.SetGrad("w", []float32{1, 1 * sign, 1, 1, 1 * sign, 1})
			o.SetGrad("b", []float32{-1, -1, -1})
			res, err := o.Step(ctx)
			if err != nil {
				out[r] = err.Error()
				return
			}
			w, _ := o.Weights("w")
			b, _ := o.Weights("b")
			out[r] = fmt.Sprintf("rank %d after step %d: w %v b %v", r, res.Step, w, b)
		})
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// rank 0 after step 1: w [0.40714288 -0.2544643 0.8821429 1.9000001 -1.0178572 0.02544643] b [0.100097656 0.100097656 0.100097656]
	// rank 1 after step 1: w [0.40714288 -0.2544643 0.8821429 1.9000001 -1.0178572 0.02544643] b [0.100097656 0.100097656 0.100097656]
}

// NewLayout shows where each parameter lands in the flat buckets before any
// optimizer exists: here three parameters on 4 ranks.
func ExampleNewLayout() {
	params := []optimizer.Param{
		{Name: "w", Shape: []int{300, 7}},
		{Name: "b", Shape: []int{7}, HighPrecision: true},
		{Name: "v", Shape: []int{1000}},
	}
	l, err := optimizer.NewLayout(params, 4, shard.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, b := range l.Buckets {
		fmt.Printf("bucket high-precision=%t: %d elements, %d per rank\n", b.HighPrecision, b.Size, b.ShardSize)
	}
	// Output:
	// bucket high-precision=false: 3584 elements, 896 per rank
	// bucket high-precision=true: 64 elements, 16 per rank
}

// Rule.Moments names the per-element state an update rule keeps, as
// checkpoints and memory reports name it.
func ExampleRule_Moments() {
	fmt.Println(optimizer.RuleAdamW, optimizer.RuleAdamW.Moments())
	fmt.Println(optimizer.RuleSGD, optimizer.RuleSGD.Moments())
	// Output:
	// adamw [m v]
	// sgd [m]
}

// A 1024x1024 matrix on 8 ranks with an FP8 first moment and a bfloat16
// second moment: the planner counts each moment and the FP8 block scales.
func ExampleConfig_momentTypes() {
	params := []optimizer.Param{{Name: "w", Shape: []int{1024, 1024}}}
	cfg := optimizer.Config{FirstMomentType: optimizer.MomentFP8, SecondMomentType: optimizer.MomentBFloat16}
	rep, err := optimizer.PredictMemory(params, 8, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range []string{optimizer.BufMaster, optimizer.BufMomentM, optimizer.BufMomentV, optimizer.BufMomentScales} {
		fmt.Printf("%s: %d bytes\n", name, rep.Get(name))
	}
	// Output:
	// fp32 master shard: 524288 bytes
	// moment m shard: 131072 bytes
	// moment v shard: 262144 bytes
	// moment block scales: 4096 bytes
}
