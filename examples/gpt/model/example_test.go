package model_test

import (
	"fmt"
	"time"

	"github.com/distopt/distopt/examples/gpt/model"
)

func ExamplePreset() {
	c, _ := model.Preset("small")
	fp8 := 0
	for _, p := range c.Params() {
		if !p.HighPrecision {
			fp8++
		}
	}
	fmt.Printf("%d parameters, %d FP8 matrices\n", c.NumParams(), fp8)
	// Output: 86039040 parameters, 48 FP8 matrices
}

// The floor of a training step of the two benchmark shapes on one H200:
// what no implementation of this model can beat at the measured rates.
func ExampleConfig_Floor() {
	for _, s := range []struct {
		preset string
		batch  int
	}{{"small", 16}, {"1.3b", 4}} {
		c := model.Presets[s.preset]
		f := c.Floor(s.batch, model.H200Rates)
		ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
		fmt.Printf("%s x %d: GEMM %.1f ms, attention %.1f, elementwise %.1f, update %.1f: %.1f ms, %.0fk tokens/s\n",
			s.preset, s.batch, ms(f.GEMM), ms(f.Attention), ms(f.Elementwise), ms(f.Update), ms(f.Total()),
			float64(s.batch*c.Seq)/f.Total().Seconds()/1e3)
	}
	// Output:
	// small x 16: GEMM 6.4 ms, attention 3.0, elementwise 2.2, update 0.5: 12.2 ms, 1342k tokens/s
	// 1.3b x 4: GEMM 45.7 ms, attention 16.1, elementwise 5.9, update 7.4: 75.1 ms, 109k tokens/s
}
