package barplot_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/distopt/distopt/plan/barplot"
)

// Draw the memory per rank of two configurations, stacked by part, and
// write it as a PNG (an .svg path writes SVG).
func Example() {
	dir, err := os.MkdirTemp("", "barplot")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	c := &barplot.Chart{
		Title:  "Memory per rank, 1.3B parameters, d = 8",
		Unit:   "GiB per rank",
		Series: []string{"weights", "gradients", "optimizer state"},
		Bars: []barplot.Bar{
			{Label: "BF16 + FP32 master clone", Values: []float64{2.4, 2.4, 14.5}},
			{Label: "distopt FP8, FP32 moments", Values: []float64{1.2, 2.4, 1.8}},
		},
	}
	path := filepath.Join(dir, "memory.png")
	if err := c.Save(path); err != nil {
		panic(err)
	}
	st, err := os.Stat(path)
	fmt.Printf("%t %.1f GiB\n", err == nil && st.Size() > 0, c.Bars[1].Total())
	// Output: true 5.4 GiB
}
