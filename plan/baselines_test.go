package plan

import (
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
)

// TestBaselineFormulas checks the published formulas, written out here:
// 16 bytes per parameter for FP32 Adam and for mixed precision with a
// master clone; Megatron's distributed optimizer 6 + 12/d as its
// documentation gives it, 5 + 12/d with FP8 parameters, 6 + 8/d and 5 +
// 8/d with BF16 moments; distopt's 1 + 2 + 12/d (8/d with BF16 moments)
// also against the exact prediction of the buffers for a model whose
// sizes leave no padding.
func TestBaselineFormulas(t *testing.T) {
	want := map[string]func(d float64) float64{
		"FP32 Adam, unsharded":                      func(float64) float64 { return 4 + 4 + 4 + 4 },
		"BF16 + FP32 master clone":                  func(float64) float64 { return 2 + 2 + 4 + 4 + 4 },
		"Megatron BF16 distributed optimizer":       func(d float64) float64 { return 6 + 12/d },
		"Megatron, BF16 moments":                    func(d float64) float64 { return 6 + (4+2+2)/d },
		"Megatron --fp8-param-gather":               func(d float64) float64 { return 1 + 4 + 12/d },
		"Megatron --fp8-param-gather, BF16 moments": func(d float64) float64 { return 1 + 4 + (4+2+2)/d },
		"distopt FP8, FP32 moments":                 func(d float64) float64 { return 1 + 2 + 12/d },
		"distopt FP8, BF16 moments":                 func(d float64) float64 { return 1 + 2 + 8/d },
	}
	if len(Baselines) != len(want) {
		t.Fatalf("%d baselines, %d formulas", len(Baselines), len(want))
	}
	params := []optimizer.Param{{Name: "a", Shape: []int{4096, 1024}}, {Name: "b", Shape: []int{1024, 2048}}}
	for d := 1; d <= 1024; d *= 2 {
		for _, b := range Baselines {
			f, ok := want[b.Name]
			if !ok {
				t.Fatalf("no formula for %q", b.Name)
			}
			if got := b.BytesPerParam(d); math.Abs(got-f(float64(d))) > 1e-12 {
				t.Fatalf("%s at d=%d: %g", b.Name, d, got)
			}
		}
		for _, mt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
			rep, err := optimizer.PredictMemory(params, d, optimizer.Config{FirstMomentType: optimizer.MomentOf(mt), SecondMomentType: optimizer.MomentOf(mt)})
			if err != nil {
				t.Fatal(err)
			}
			name := "distopt FP8, FP32 moments"
			if mt == buffer.BFloat16 {
				name = "distopt FP8, BF16 moments"
			}
			exact := rep.Total() - rep.Get(optimizer.BufScales)
			if got := float64(exact) / float64(rep.Params); math.Abs(got-want[name](float64(d))) > 1e-9 {
				t.Fatalf("d=%d %s: predicted %g bytes/param", d, name, got)
			}
		}
	}
}

func TestFormula(t *testing.T) {
	for _, tc := range []struct {
		b    Baseline
		want string
	}{
		{Baseline{Weights: 4, Grads: 4, State: 8}, "4 + 4 + 8"},
		{Baseline{Weights: 2, Grads: 4, Sharded: 12}, "2 + 4 + 12/d"},
		{Baseline{Weights: 0.5, Grads: 2, State: 1, Sharded: 8}, "0.5 + 2 + 1 + 8/d"},
	} {
		if got := tc.b.Formula(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.b, got, tc.want)
		}
	}
}
