package chart

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// Bars is a stacked vertical bar chart: one bar per element of Bars, each a
// stack of one segment per series, the first series at the bottom.
type Bars struct {
	Title    string // drawn large at the top
	Subtitle string // under the title, wrapped at spaces to the width (optional)
	Unit     string // caption of the value axis, e.g. "GiB per rank"
	// Series names the segments of every stack, bottom first. With one
	// series the legend is left out.
	Series []string
	Bars   []Bar
	// Width and Height of the image in pixels (0: 1200 and 700).
	Width, Height int
	// Format writes a bar's total above it (nil: three significant digits).
	Format func(float64) string
}

// Bar is one stack: Values[i] is the height of series i.
type Bar struct {
	Label  string // under the bar, wrapped at spaces to the bar's slot
	Values []float64
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
	{180, 180, 60, 255},  // olive
	{60, 180, 200, 255},  // cyan
}

var (
	white = color.RGBA{255, 255, 255, 255}
	ink   = color.RGBA{30, 30, 30, 255}
	axis  = color.RGBA{90, 90, 90, 255}
	grid  = color.RGBA{228, 228, 228, 255}
)

// Layout constants in pixels; text is drawn at textScale, the title at
// titleScale.
const (
	margin     = 24
	textScale  = 2
	titleScale = 3
	swatch     = 14
	gap        = 8
)

// Total is the sum of the bar's values.
func (b Bar) Total() float64 {
	var t float64
	for _, v := range b.Values {
		t += v
	}
	return t
}

func (c *Bars) validate() error {
	if len(c.Bars) == 0 || len(c.Series) == 0 {
		return fmt.Errorf("%w: %d bars, %d series", ErrEmpty, len(c.Bars), len(c.Series))
	}
	for _, b := range c.Bars {
		if len(b.Values) != len(c.Series) {
			return fmt.Errorf("%w: bar %q has %d values for %d series", ErrValue, b.Label, len(b.Values), len(c.Series))
		}
		for i, v := range b.Values {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%w: bar %q, series %q: %v", ErrValue, b.Label, c.Series[i], v)
			}
		}
	}
	return nil
}

// Draw renders the chart. Errors: ErrEmpty, ErrValue, ErrSize.
func (c *Bars) Draw() (*image.RGBA, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	w, h := c.Width, c.Height
	if w == 0 {
		w = 1200
	}
	if h == 0 {
		h = 700
	}
	format := c.Format
	if format == nil {
		format = func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }
	}
	var top float64
	for _, b := range c.Bars {
		top = max(top, b.Total())
	}
	ticks := niceTicks(top)
	top = ticks[len(ticks)-1]

	th := textHeight(textScale)
	line := lineStep * textScale
	// Vertical frame: title, subtitle, unit caption, plot, wrapped labels.
	y := margin
	titleY := y
	if c.Title != "" {
		y += textHeight(titleScale) + gap
	}
	subY := y
	var sub []string
	if c.Subtitle != "" {
		sub = wrap(c.Subtitle, max(1, (w-2*margin+textScale)/(advance*textScale)))
		y += len(sub) * line
	}
	unitY := y + gap
	y = unitY + line + th/2 // room for the unit caption and the top tick label
	plotTop := y + th       // room for the totals above the tallest bar

	// Horizontal frame: tick labels, plot, legend.
	labels := make([]string, len(ticks))
	labelW := 0
	for i, t := range ticks {
		labels[i] = tickLabel(t, ticks[1]-ticks[0])
		labelW = max(labelW, textWidth(labels[i], textScale))
	}
	plotLeft := margin + labelW + gap
	plotRight := w - margin
	if len(c.Series) > 1 {
		legendW := 0
		for _, s := range c.Series {
			legendW = max(legendW, textWidth(s, textScale))
		}
		plotRight -= swatch + gap + legendW + 2*gap
	}
	slot := 0
	if plotRight > plotLeft {
		slot = (plotRight - plotLeft) / len(c.Bars)
	}
	perLine := max(1, (slot-2*gap+textScale)/(advance*textScale)) // n glyphs take n*advance-1 font pixels
	wrapped := make([][]string, len(c.Bars))
	maxLines := 1
	for i, b := range c.Bars {
		wrapped[i] = wrap(b.Label, perLine)
		maxLines = max(maxLines, len(wrapped[i]))
	}
	plotBottom := h - margin - maxLines*line
	if slot < 3 || plotBottom-plotTop < 40 {
		return nil, fmt.Errorf("%w: %dx%d pixels for %d bars", ErrSize, w, h, len(c.Bars))
	}

	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill(img, img.Rect, white)
	if c.Title != "" {
		drawText(img, margin, titleY, c.Title, titleScale, ink)
	}
	for i, l := range sub {
		drawText(img, margin, subY+i*line, l, textScale, ink)
	}
	if c.Unit != "" {
		drawText(img, margin, unitY, c.Unit, textScale, ink)
	}
	yOf := func(v float64) int {
		return plotBottom - int(math.Round(v/top*float64(plotBottom-plotTop)))
	}
	for i, t := range ticks {
		ty := yOf(t)
		fill(img, image.Rect(plotLeft, ty, plotRight, ty+1), grid)
		drawText(img, plotLeft-gap-textWidth(labels[i], textScale), ty-glyphH*textScale/2, labels[i], textScale, ink)
	}
	for i, b := range c.Bars {
		x0 := plotLeft + i*slot
		bw := max(2, slot*3/5)
		bx := x0 + (slot-bw)/2
		base := 0.0
		for s, v := range b.Values {
			y0, y1 := yOf(base+v), yOf(base)
			fill(img, image.Rect(bx, y0, bx+bw, y1), Palette[s%len(Palette)])
			base += v
		}
		total := format(b.Total())
		drawText(img, x0+(slot-textWidth(total, textScale))/2, yOf(base)-th-gap/2, total, textScale, ink)
		for l, s := range wrapped[i] {
			drawText(img, x0+(slot-textWidth(s, textScale))/2, plotBottom+gap+l*line, s, textScale, ink)
		}
	}
	fill(img, image.Rect(plotLeft, plotTop-th/2, plotLeft+1, plotBottom+1), axis)
	fill(img, image.Rect(plotLeft, plotBottom, plotRight, plotBottom+1), axis)
	if len(c.Series) > 1 {
		lx := plotRight + 2*gap
		for k := range c.Series {
			s := len(c.Series) - 1 - k // top of the stack first, as drawn
			ly := plotTop + k*line
			fill(img, image.Rect(lx, ly, lx+swatch, ly+swatch), Palette[s%len(Palette)])
			drawText(img, lx+swatch+gap, ly, c.Series[s], textScale, ink)
		}
	}
	return img, nil
}

// WritePNG draws the chart and encodes it as PNG to w.
func (c *Bars) WritePNG(w io.Writer) error {
	img, err := c.Draw()
	if err != nil {
		return err
	}
	return png.Encode(w, img)
}

// SavePNG draws the chart into the file path (created or truncated).
func (c *Bars) SavePNG(path string) (err error) {
	img, err := c.Draw()
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	bw := bufio.NewWriter(f)
	if err := png.Encode(bw, img); err != nil {
		return fmt.Errorf("chart: writing %s: %w", path, err)
	}
	return bw.Flush()
}

// niceTicks returns the ticks of a value axis from 0 to at least top: a
// step of 1, 2 or 5 times a power of ten, chosen so that there are 4 to 10
// intervals. top = 0 gives 0 and 1.
func niceTicks(top float64) []float64 {
	if top <= 0 {
		return []float64{0, 1}
	}
	raw := top / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	n := int(math.Ceil(top/step - 1e-9))
	ticks := make([]float64, n+1)
	for i := range ticks {
		ticks[i] = float64(i) * step
	}
	return ticks
}

// tickLabel formats a tick with as many decimals as its step needs.
func tickLabel(v, step float64) string {
	dec := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// wrap splits s at spaces into lines of at most n runes; a longer word is
// cut into pieces of n.
func wrap(s string, n int) []string {
	var lines []string
	cur := ""
	for _, word := range strings.Fields(s) {
		for len([]rune(word)) > n {
			if cur != "" {
				lines = append(lines, cur)
				cur = ""
			}
			r := []rune(word)
			lines = append(lines, string(r[:n]))
			word = string(r[n:])
		}
		switch {
		case cur == "":
			cur = word
		case len([]rune(cur))+1+len([]rune(word)) <= n:
			cur += " " + word
		default:
			lines = append(lines, cur)
			cur = word
		}
	}
	if cur != "" || len(lines) == 0 {
		lines = append(lines, cur)
	}
	return lines
}
