package optimizer

import (
	"math"
	"testing"

	"github.com/distopt/distopt/collective"
)

// TestBaselineFormulas checks the published formulas: 16 bytes per parameter
// for FP32 Adam and for mixed precision with a master clone, 6 + 12/d for
// Megatron's distributed optimizer, and distopt's 1 + 2 + 12/d (8/d with
// BF16 moments) against the exact prediction of the buffers for a model
// whose sizes leave no padding.
func TestBaselineFormulas(t *testing.T) {
	want := map[string]func(d float64) float64{
		"FP32 Adam, unsharded":                func(float64) float64 { return 4 + 4 + 4 + 4 },
		"BF16 + FP32 master clone":            func(float64) float64 { return 2 + 2 + 4 + 4 + 4 },
		"Megatron BF16 distributed optimizer": func(d float64) float64 { return 2 + 4 + (4+4+4)/d },
		"distopt FP8, FP32 moments":           func(d float64) float64 { return 1 + 2 + 12/d },
		"distopt FP8, BF16 moments":           func(d float64) float64 { return 1 + 2 + 8/d },
	}
	params := []Param{{Name: "a", Shape: []int{4096, 1024}}, {Name: "b", Shape: []int{1024, 2048}}}
	for d := 1; d <= 1024; d *= 2 {
		for _, b := range Baselines {
			if got := b.BytesPerParam(d); math.Abs(got-want[b.Name](float64(d))) > 1e-12 {
				t.Fatalf("%s at d=%d: %g", b.Name, d, got)
			}
		}
		for _, mt := range []collective.DType{collective.Float32, collective.BFloat16} {
			rep, err := PredictMemory(params, d, Config{MomentType: mt})
			if err != nil {
				t.Fatal(err)
			}
			name := "distopt FP8, FP32 moments"
			if mt == collective.BFloat16 {
				name = "distopt FP8, BF16 moments"
			}
			exact := rep.Total() - rep.Get(BufScales)
			if got := float64(exact) / float64(rep.Params); math.Abs(got-want[name](float64(d))) > 1e-9 {
				t.Fatalf("d=%d %s: predicted %g bytes/param", d, name, got)
			}
		}
	}
}

func TestGPT13B(t *testing.T) {
	n := GPT13B.NumParams()
	if n < 1.25e9 || n > 1.45e9 {
		t.Fatalf("GPT13B has %d parameters", n)
	}
}
