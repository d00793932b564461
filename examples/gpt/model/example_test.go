package model_test

import (
	"fmt"

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
