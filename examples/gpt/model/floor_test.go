package model

import (
	"math"
	"testing"
)

// TestGEMMFlops checks the GEMM count against the closed form of
// FlopsPerToken (6 x the matrix parameters per token, the attention term
// aside) and the attention count against the H200 measurement it was
// derived from (1.3B shape, 4 sequences: 0.151 ms forward at 455
// TFLOP/s, 0.521 ms backward at 330).
func TestGEMMFlops(t *testing.T) {
	for name, c := range Presets {
		const tokens = 1 << 13
		attention := 12 * float64(c.Layers*c.Hidden*c.Seq) * tokens
		want := c.FlopsPerToken()*tokens - attention
		if got := c.GEMMFlops(tokens); math.Abs(got-want) > 1e-9*want {
			t.Errorf("%s: GEMM FLOPs %g, FlopsPerToken gives %g", name, got, want)
		}
	}
	fwd, bwd := Presets["1.3b"].AttentionFlops(4)
	perLayer := 24.0
	if ms := fwd / perLayer / 455e12 * 1e3; math.Abs(ms-0.151) > 0.002 {
		t.Errorf("forward per layer at 455 TFLOP/s: %.4f ms, measured 0.151", ms)
	}
	if ms := bwd / perLayer / 330e12 * 1e3; math.Abs(ms-0.521) > 0.002 {
		t.Errorf("backward per layer at 330 TFLOP/s: %.4f ms, measured 0.521", ms)
	}
}

// TestFloorScales checks that each part of the floor is its work over its
// rate: doubling one rate halves that part alone.
func TestFloorScales(t *testing.T) {
	c := Presets["small"]
	base := c.Floor(16, H200Rates)
	r := H200Rates
	r.Bandwidth *= 2
	got := c.Floor(16, r)
	if got.GEMM != base.GEMM || got.Attention != base.Attention || absDiff(got.Elementwise*2, base.Elementwise) > 2 || absDiff(got.Update*2, base.Update) > 2 {
		t.Errorf("bandwidth doubled: %+v from %+v", got, base)
	}
	if base.Total() != base.GEMM+base.Attention+base.Elementwise+base.Update {
		t.Errorf("Total %v", base.Total())
	}
}

func absDiff[T ~int64](a, b T) T {
	if a > b {
		return a - b
	}
	return b - a
}
