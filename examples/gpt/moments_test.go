package main

import "testing"

// TestFP8MomentsQuality is the training-quality item of issue 18 for the
// GPT example, on the CPU: the runs of TestFP8GradQuality (2 ranks, 300
// steps on GOROOT/src/strings) with the Adam moments in float32 and in
// 8 and 16 bits (-moments bf16, fp8,bf16, fp8: E4M3 first moment, E4M3 of
// the second moment's root with stochastic rounding, a scale per 128
// elements), from the same initial weights and batches. Each final
// validation loss must be within 1% of the float32-moment run's. About a
// minute of CPU; skipped with -short.
func TestFP8MomentsQuality(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: four training runs")
	}
	q := newQuality(t)
	base := q.run("-moments", "fp32")
	t.Logf("float32 moments: validation loss %s", points(base))
	for _, m := range []string{"bf16", "fp8,bf16", "fp8"} { // fp8,bf16: the default
		c := q.run("-moments", m)
		rel := c.Valid[2].Loss/base.Valid[2].Loss - 1
		t.Logf("-moments %s: validation loss %s: %+.2f%% at the end", m, points(c), 100*rel)
		if !(rel <= 0.01 && rel >= -0.01) {
			t.Errorf("-moments %s: final validation loss %.4f, float32 moments %.4f: %+.2f%%, want within 1%%", m, c.Valid[2].Loss, base.Valid[2].Loss, 100*rel)
		}
	}
}
