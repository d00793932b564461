package barplot

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart is a stacked vertical bar chart.
type Chart struct {
	Title    string // the first line of the title
	Subtitle string // further title lines, wrapped at spaces (optional)
	Unit     string // caption of the value axis, e.g. "GiB per rank"
	// Series names the segments of every stack, bottom first. With one
	// series the legend is left out.
	Series []string
	Bars   []Bar
	// Format writes a bar's total above it (nil: three significant digits).
	Format func(float64) string
	// Width and Height of the figure (0: 10 x 6 inches).
	Width, Height vg.Length
}

// Bar is one stack: Values[i] is the height of series i.
type Bar struct {
	Label  string // under the bar, wrapped at spaces
	Values []float64
}

// Total is the sum of the bar's values.
func (b Bar) Total() float64 {
	var t float64
	for _, v := range b.Values {
		t += v
	}
	return t
}

// Palette is the fill colour of each series, in order (series past the
// end reuse it from the start).
var Palette = []color.RGBA{
	{59, 110, 180, 255},  // blue
	{230, 140, 40, 255},  // orange
	{70, 160, 80, 255},   // green
	{200, 60, 60, 255},   // red
	{140, 100, 180, 255}, // purple
	{150, 100, 70, 255},  // brown
	{220, 120, 180, 255}, // pink
	{128, 128, 128, 255}, // grey
}

// ErrChart marks a chart that cannot be drawn.
var ErrChart = errors.New("barplot: invalid chart")

func (c *Chart) validate() error {
	if len(c.Series) == 0 || len(c.Bars) == 0 {
		return fmt.Errorf("%w: %d series, %d bars", ErrChart, len(c.Series), len(c.Bars))
	}
	for _, b := range c.Bars {
		if len(b.Values) != len(c.Series) {
			return fmt.Errorf("%w: bar %q has %d values for %d series", ErrChart, b.Label, len(b.Values), len(c.Series))
		}
		for _, v := range b.Values {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%w: bar %q has the value %g (want finite, not negative)", ErrChart, b.Label, v)
			}
		}
	}
	return nil
}

// Plot builds the gonum plot of the chart.
func (c *Chart) Plot() (*plot.Plot, error) {
	p, _, _, err := c.plot()
	return p, err
}

// plot builds the plot and returns it with its parts: a bar chart per
// series and the labels of the totals.
func (c *Chart) plot() (*plot.Plot, []*plotter.BarChart, *plotter.Labels, error) {
	if err := c.validate(); err != nil {
		return nil, nil, nil, err
	}
	p := plot.New()
	p.Title.Text = c.Title
	if c.Subtitle != "" {
		p.Title.Text += "\n" + Wrap(c.Subtitle, 100)
	}
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Y.Label.Text = c.Unit
	p.Y.Min = 0
	p.Y.Tick.Marker = Ticks{}
	p.X.Tick.Label.Font.Size = vg.Points(9)
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil // bars need no vertical lines
	p.Add(grid)
	p.Legend.Top = true
	width := vg.Points(math.Max(12, math.Min(60, 420/float64(len(c.Bars)))))
	var below *plotter.BarChart
	top := 0.0
	bars := make([]*plotter.BarChart, len(c.Series))
	for s := range c.Series {
		vals := make(plotter.Values, len(c.Bars))
		for i, b := range c.Bars {
			vals[i] = b.Values[s]
		}
		bc, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("barplot: %w", err)
		}
		bc.Color = Palette[s%len(Palette)]
		bc.LineStyle.Width = 0
		if below != nil {
			bc.StackOn(below)
		}
		below = bc
		p.Add(bc)
		bars[s] = bc
	}
	for s := len(c.Series) - 1; s >= 0 && len(c.Series) > 1; s-- { // top of the stack first
		p.Legend.Add(c.Series[s], bars[s])
	}
	labels := make([]string, len(c.Bars))
	totals := plotter.XYLabels{XYs: make(plotter.XYs, len(c.Bars)), Labels: make([]string, len(c.Bars))}
	for i, b := range c.Bars {
		labels[i] = Wrap(b.Label, 14)
		totals.XYs[i] = plotter.XY{X: float64(i), Y: b.Total()}
		totals.Labels[i] = c.format(b.Total())
		top = math.Max(top, b.Total())
	}
	l, err := plotter.NewLabels(totals)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("barplot: %w", err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = -0.5 // centred on the bar
	}
	l.Offset.Y = vg.Points(3)
	p.Add(l)
	p.NominalX(labels...)
	// Room at both ends for the wrapped labels of the outer bars.
	p.X.Min, p.X.Max = -0.7, float64(len(c.Bars))-0.3
	p.Legend.XOffs = -vg.Points(8)
	// Room above the tallest bar for its total and, with several series,
	// the legend.
	p.Y.Max = top * (1.1 + 0.07*float64(len(c.Series)))
	if top == 0 {
		p.Y.Max = 1
	}
	return p, bars, l, nil
}

func (c *Chart) format(v float64) string {
	if c.Format != nil {
		return c.Format(v)
	}
	return fmt.Sprintf("%.3g", v)
}

// Save draws the chart into path, PNG or SVG by its extension (".png",
// ".svg"), c.Width x c.Height (default 10 x 6 inches).
func (c *Chart) Save(path string) error {
	p, err := c.Plot()
	if err != nil {
		return err
	}
	return SavePlot(p, path, c.Width, c.Height)
}

// SavePlot draws any gonum plot into path, PNG (at 120 dpi) or SVG by its
// extension, w x h (0: 10 x 6 inches).
func SavePlot(p *plot.Plot, path string, w, h vg.Length) error {
	return SaveCanvas(path, w, h, func(c draw.Canvas) { p.Draw(c) })
}

// SaveCanvas writes what paint draws on a canvas of w x h (0: 10 x 6
// inches) to path, as PNG or SVG by its extension.
func SaveCanvas(path string, w, h vg.Length, paint func(draw.Canvas)) error {
	if w == 0 || h == 0 {
		w, h = 10*vg.Inch, 6*vg.Inch
	}
	var canvas vg.CanvasWriterTo
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(120))}
	case ".svg":
		canvas = vgsvg.New(w, h)
	default:
		return fmt.Errorf("%w: %s: want a .png or .svg file", ErrChart, path)
	}
	paint(draw.New(canvas))
	return writeFile(path, canvas)
}

// writeFile writes w's output to path.
func writeFile(path string, w io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("barplot: %w", err)
	}
	if _, err = w.WriteTo(f); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("barplot: writing %s: %w", path, err)
	}
	return nil
}

// Wrap breaks s into lines of at most width characters, at spaces, and
// within a longer word after a hyphen that follows a letter or digit
// ("--fp8-param-gather" can break after "--fp8-" and "param-"). A piece
// longer than width gets a line of its own.
func Wrap(s string, width int) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		for i, piece := range hyphenPieces(w, width) {
			sep := " "
			if i > 0 {
				sep = ""
			}
			switch {
			case line == "":
				line = piece
			case len(line)+len(sep)+len(piece) <= width:
				line += sep + piece
			default:
				lines = append(lines, line)
				line = piece
			}
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// hyphenPieces cuts a word longer than width after each hyphen that
// follows a letter or digit; a shorter word is one piece.
func hyphenPieces(w string, width int) []string {
	if len(w) <= width {
		return []string{w}
	}
	var pieces []string
	start := 0
	for i := 1; i < len(w)-1; i++ {
		if w[i] == '-' && isAlnum(w[i-1]) {
			pieces = append(pieces, w[start:i+1])
			start = i + 1
		}
	}
	return append(pieces, w[start:])
}

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// Ticks marks an axis at four to eight round values (1, 2 or 5 times a
// power of ten apart), labelled in the shortest form ("2.5", "10").
type Ticks struct{}

// Ticks returns the marks of [min, max].
func (Ticks) Ticks(min, max float64) []plot.Tick {
	if !(max > min) {
		return []plot.Tick{{Value: min, Label: strconv.FormatFloat(min, 'g', 4, 64)}}
	}
	step := NiceStep((max - min) / 4)
	var ticks []plot.Tick
	for k := math.Ceil(min / step); k*step <= max*(1+1e-9); k++ {
		v := k * step
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 4, 64)})
	}
	return ticks
}

// NiceStep is the greatest of 1, 2 and 5 times a power of ten that is at
// most x (x > 0).
func NiceStep(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{5, 2, 1} {
		if m*p <= x*(1+1e-12) {
			return m * p
		}
	}
	return p
}
