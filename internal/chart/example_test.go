package chart_test

import (
	"bytes"
	"fmt"
	"image/png"
	"log"

	"github.com/distopt/distopt/internal/chart"
)

func ExampleBars() {
	c := chart.Bars{
		Title:  "Bytes per parameter per rank, d = 8",
		Unit:   "bytes",
		Series: []string{"weights", "gradients", "optimizer state"},
		Bars: []chart.Bar{
			{Label: "FP32 Adam", Values: []float64{4, 4, 8}},
			{Label: "Megatron BF16", Values: []float64{2, 4, 12.0 / 8}},
			{Label: "distopt FP8", Values: []float64{1, 2, 12.0 / 8}},
		},
	}
	var buf bytes.Buffer
	if err := c.WritePNG(&buf); err != nil {
		log.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(img.Bounds().Size(), c.Bars[2].Total())
	// Output: (1200,700) 4.5
}
