package main

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/distopt/distopt/plan"
	"github.com/distopt/distopt/plan/barplot"
)

// chartLine is one line of the plan chart: GiB per rank at each d.
type chartLine struct {
	name string
	gib  []float64
}

// chartLines are the lines of the plan chart, the rows of the comparison
// table: every baseline from its bytes per parameter, this configuration
// of distopt, exact, and the gradient option it does not choose.
func (p *memoryPlan) chartLines() []chartLine {
	var lines []chartLine
	for _, b := range plan.Baselines {
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
	alt := chartLine{name: p.altName + " (exact)"}
	for i := range p.ds {
		exact.gib = append(exact.gib, float64(p.total(i))/(1<<30))
		alt.gib = append(alt.gib, float64(p.alt[i])/(1<<30))
	}
	return append(lines, alt, exact)
}

// sameAs returns, for each line, the index of the first earlier line it
// coincides with (-1: none). Lines coincide when they are within 0.5% of
// the chart's height at every d: drawn plainly, one would hide the other.
func sameAs(lines []chartLine) []int {
	top := 0.0
	for _, l := range lines {
		top = max(top, slices.Max(l.gib))
	}
	same := make([]int, len(lines))
	for j, l := range lines {
		same[j] = slices.IndexFunc(lines[:j], func(e chartLine) bool {
			for i := range l.gib {
				if math.Abs(e.gib[i]-l.gib[i]) > 0.005*top {
					return false
				}
			}
			return true
		})
	}
	return same
}

// chartGlyphs are the point markers of the lines, in turn: seven, so
// that with the eight colours of the palette no pair repeats soon.
var chartGlyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.RingGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.PyramidGlyph{}}

// chartTop is the top of the chart's value axis: 5% above the highest
// point of the lines, or of the GPU's memory (gpu 0: none) when that is
// at most half as high again: a far higher GPU line would flatten them.
func chartTop(lines []chartLine, gpu float64) float64 {
	top := 0.0
	for _, l := range lines {
		top = max(top, slices.Max(l.gib))
	}
	if gpu <= 1.5*top {
		top = max(top, gpu)
	}
	return top * 1.05
}

// writeChart draws the comparison into path (.png or .svg): GiB per rank
// against the data-parallel size (log scale), one line per configuration
// with a marker at each planned d, distopt's exact line in black, and the
// GPU's memory as a dashed red line when -gpu is given (named in the
// legend only when far above the lines). A line that would
// hide an earlier one is dashed and says so in the legend, which sits
// right of the plot. A plan of one d is drawn as bars.
func (p *memoryPlan) writeChart(path string) error {
	lines := p.chartLines()
	if len(p.ds) == 1 {
		c := barplot.Chart{Title: fmt.Sprintf("Memory per rank at d = %d", p.ds[0]), Subtitle: p.model, Unit: "GiB per rank", Series: []string{"total"},
			Format: func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }}
		for _, l := range lines {
			c.Bars = append(c.Bars, barplot.Bar{Label: l.name, Values: l.gib})
		}
		return c.Save(path)
	}
	pl := plot.New()
	pl.Title.Text = barplot.Wrap("Memory per rank: "+p.model, 80)
	pl.X.Label.Text = "data-parallel size d"
	pl.Y.Label.Text = "GiB per rank (weights, gradients, optimizer state)"
	pl.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, d := range p.ds {
		ticks = append(ticks, plot.Tick{Value: float64(d), Label: strconv.Itoa(d)})
	}
	pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	pl.Y.Tick.Marker = barplot.Ticks{}
	pl.Add(plotter.NewGrid())
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Legend.TextStyle.Font.Size = vg.Points(9)
	if err := p.addLines(pl, lines); err != nil {
		return err
	}
	gpu := float64(p.gpu.Bytes) / (1 << 30)
	pl.Y.Min, pl.Y.Max = 0, chartTop(lines, gpu)
	if p.gpu.Bytes > 0 {
		ln, _ := plotter.NewLine(plotter.XYs{{X: float64(slices.Min(p.ds)), Y: gpu}, {X: float64(slices.Max(p.ds)), Y: gpu}})
		ln.Color, ln.Dashes = color.RGBA{200, 0, 0, 255}, []vg.Length{vg.Points(6), vg.Points(4)}
		name := fmt.Sprintf("%s memory (%.1f GiB)", p.gpu.Name, gpu)
		if gpu > pl.Y.Max {
			name += ", above the chart"
		} else {
			pl.Add(ln)
		}
		pl.Legend.Add(name, ln)
	}
	legend := pl.Legend
	pl.Legend = plot.NewLegend() // drawn right of the plot, not over it
	return barplot.SaveCanvas(path, 15*vg.Inch, 7*vg.Inch, func(c draw.Canvas) {
		split := c.Min.X + 0.62*(c.Max.X-c.Min.X)
		pl.Draw(draw.Crop(c, 0, split-c.Max.X, 0, 0))
		legend.Draw(draw.Crop(c, split-c.Min.X+vg.Points(12), 0, 0, -vg.Points(40)))
	})
}

// addLines adds the lines to pl with their markers and legend entries.
func (p *memoryPlan) addLines(pl *plot.Plot, lines []chartLine) error {
	same := sameAs(lines)
	for i, l := range lines {
		xys := make(plotter.XYs, len(p.ds))
		for j, d := range p.ds {
			xys[j] = plotter.XY{X: float64(d), Y: l.gib[j]}
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		ln, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		ln.Color, ln.Width = barplot.Palette[i%len(barplot.Palette)], vg.Points(1.5)
		if i == len(lines)-1 {
			ln.Color, ln.Width = color.Black, vg.Points(2.5)
		}
		pts.Shape, pts.Color, pts.Radius = chartGlyphs[i%len(chartGlyphs)], ln.Color, vg.Points(3.5)
		name := l.name
		if s := same[i]; s >= 0 {
			ln.Dashes = []vg.Length{vg.Points(5), vg.Points(4)}
			pts.Radius = vg.Points(5.5) // drawn around the earlier line's markers
			name += fmt.Sprintf(": dashed, the same as line %d", s+1)
		}
		pl.Add(ln, pts)
		pl.Legend.Add(fmt.Sprintf("%d. %s", i+1, name), ln, pts)
	}
	return nil
}
