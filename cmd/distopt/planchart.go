package main

import (
	"cmp"
	"fmt"
	"image/color"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/distopt/distopt/internal/barplot"
	"github.com/distopt/distopt/internal/plan"
)

// chartLine is one line of the plan chart: GiB per rank at each d.
type chartLine struct {
	name string
	gib  []float64
}

// chartLines are the lines of the plan chart: every baseline but distopt's
// formulas, from its bytes per parameter, then this configuration of
// distopt, exact.
func (p *memoryPlan) chartLines() []chartLine {
	var lines []chartLine
	for _, b := range plan.Baselines {
		if b.Distopt {
			continue
		}
		l := chartLine{name: b.Name + " (" + b.Formula() + ")"}
		for _, d := range p.ds {
			l.gib = append(l.gib, b.BytesPerParam(d)*float64(p.n)/(1<<30))
		}
		lines = append(lines, l)
	}
	exact := chartLine{name: "distopt, this configuration (exact)"}
	if p.fp8Desc != "" {
		exact.name = "distopt, this configuration with " + p.fp8Desc + " (exact)"
	}
	for i := range p.ds {
		exact.gib = append(exact.gib, float64(p.total(i))/(1<<30))
	}
	return append(lines, exact)
}

// writeChart draws the comparison into path (.png or .svg): GiB per rank
// against the data-parallel size (log scale), one line per configuration,
// distopt's in black, and the GPU's memory as a dashed line when -gpu is
// given. A plan of one d is drawn as bars.
func (p *memoryPlan) writeChart(path string) error {
	lines := p.chartLines()
	title := "Memory per rank: " + p.model
	if len(p.ds) == 1 {
		c := barplot.Chart{Title: fmt.Sprintf("Memory per rank at d = %d", p.ds[0]), Subtitle: p.model, Unit: "GiB per rank", Series: []string{"total"},
			Format: func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }}
		for _, l := range lines {
			c.Bars = append(c.Bars, barplot.Bar{Label: l.name, Values: l.gib})
		}
		return c.Save(path)
	}
	pl := plot.New()
	pl.Title.Text = barplot.Wrap(title, 100)
	pl.X.Label.Text = "data-parallel size d"
	pl.Y.Label.Text = "GiB per rank (weights, gradients, optimizer state)"
	pl.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, d := range p.ds {
		ticks = append(ticks, plot.Tick{Value: float64(d), Label: strconv.Itoa(d)})
	}
	pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	pl.Y.Tick.Marker = barplot.Ticks{}
	pl.Y.Min = 0
	pl.Add(plotter.NewGrid())
	pl.Legend.Top = true
	pl.Legend.TextStyle.Font.Size = vg.Points(9)
	for i, l := range lines {
		xys := make(plotter.XYs, len(p.ds))
		for j, d := range p.ds {
			xys[j] = plotter.XY{X: float64(d), Y: l.gib[j]}
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		ln, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		ln.Color, ln.Width = barplot.Palette[i%len(barplot.Palette)], vg.Points(1.5)
		if i == len(lines)-1 {
			ln.Color, ln.Width = color.Black, vg.Points(2.5)
		}
		pl.Add(ln)
		pl.Legend.Add(l.name, ln)
	}
	top := 0.0
	for _, l := range lines {
		top = max(top, slices.Max(l.gib))
	}
	if p.gpu.Bytes > 0 {
		top = max(top, float64(p.gpu.Bytes)/(1<<30))
	}
	pl.Y.Max = top * 1.5 // room for the legend above the lines
	if p.gpu.Bytes > 0 {
		mem := float64(p.gpu.Bytes) / (1 << 30)
		ln, _ := plotter.NewLine(plotter.XYs{{X: float64(slices.Min(p.ds)), Y: mem}, {X: float64(slices.Max(p.ds)), Y: mem}})
		ln.Color, ln.Dashes = color.RGBA{200, 0, 0, 255}, []vg.Length{vg.Points(6), vg.Points(4)}
		pl.Add(ln)
		pl.Legend.Add(fmt.Sprintf("%s memory (%.1f GiB)", p.gpu.Name, mem), ln)
	}
	return barplot.SavePlot(pl, path, 0, 0)
}
