package main

import (
	"io"
	"math"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// TestFP8GradientsTrain trains the MLP on 4 in-process ranks with bfloat16
// gradient reduce-scatters and with FP8 ones (-grad-fp8 e4m3 and e5m2),
// over the same 300 steps and batches: the final loss, and the mean loss
// of the last 20 steps, are within 1% of the bfloat16 run's, and far
// below the initial loss.
func TestFP8GradientsTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("trains three models")
	}
	const d, steps, bs = 4, 300, 16
	teacher := initWeights(99)
	for _, p := range params {
		if p.HighPrecision {
			for i := range teacher[p.Name] {
				teacher[p.Name][i] = 0.1
			}
		}
	}
	init := initWeights(1)
	recipe, err := fp8.ParseRecipe("current")
	if err != nil {
		t.Fatal(err)
	}
	cfg := optimizer.Config{LR: optimizer.WarmupCosine{Peak: 3e-3, Min: 3e-4, Warmup: steps / 10, Total: steps}, WeightDecay: 0.01, MaxGradNorm: 1, Recipe: recipe}
	run := func(mode string) []float64 {
		old := *gradFP8
		*gradFP8 = mode
		defer func() { *gradFP8 = old }()
		losses, _, err := trainSharded(io.Discard, d, steps, bs, teacher, init, cfg, testDeadlines)
		if err != nil {
			t.Fatalf("-grad-fp8=%q: %v", mode, err)
		}
		return losses
	}
	tail := func(l []float64) float64 {
		s := 0.0
		for _, x := range l[len(l)-20:] {
			s += x
		}
		return s / 20
	}
	ref := run("")
	t.Logf("bfloat16 gradients: final loss %.5f, mean of the last 20 steps %.5f (initial %.5f)", ref[steps-1], tail(ref), ref[0])
	for _, mode := range []string{"e4m3", "e5m2"} {
		got := run(mode)
		t.Logf("%s gradients: final loss %.5f, mean of the last 20 steps %.5f", mode, got[steps-1], tail(got))
		if math.Abs(got[steps-1]/ref[steps-1]-1) > 0.01 || math.Abs(tail(got)/tail(ref)-1) > 0.01 {
			t.Errorf("%s: final loss %.5f (last 20: %.5f), bfloat16 %.5f (%.5f): more than 1%% apart", mode, got[steps-1], tail(got), ref[steps-1], tail(ref))
		}
		if got[steps-1] > ref[0]/5 {
			t.Errorf("%s: final loss %.5f, initial %.5f: did not train", mode, got[steps-1], ref[0])
		}
	}
}
