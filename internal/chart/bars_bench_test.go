package chart

import (
	"io"
	"testing"
)

func BenchmarkWritePNG(b *testing.B) {
	c := Bars{
		Title:  "Step time by phase",
		Unit:   "ms",
		Series: []string{"reduce-scatter", "norm", "update", "amax", "cast", "all-gather"},
		Bars: []Bar{
			{Label: "distopt FP8", Values: []float64{4, 0.3, 2, 0.1, 0.9, 2}},
			{Label: "PyTorch ZeRO-1 BF16", Values: []float64{4, 0.5, 3, 0, 0.6, 4}},
		},
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.WritePNG(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
