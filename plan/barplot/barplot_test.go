package barplot

import (
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

func testChart() *Chart {
	return &Chart{
		Title: "Memory", Subtitle: "a subtitle long enough to be wrapped onto a second line of the title for sure, more than a hundred characters",
		Unit: "GiB", Series: []string{"weights", "gradients", "state"},
		Bars: []Bar{
			{Label: "Megatron --fp8-param-gather, BF16 moments", Values: []float64{1, 4, 8}},
			{Label: "distopt", Values: []float64{1, 2, 6}},
		},
		Format: func(v float64) string { return strings.Repeat("x", int(v)) },
	}
}

// TestPlot checks the plot's parts against the chart: one bar chart per
// series, each stacked on the one before, holding that series' values;
// the totals as labels at each bar's top, formatted by Format; the bar
// names as the nominal axis; room above the tallest bar.
func TestPlot(t *testing.T) {
	c := testChart()
	p, bars, labels, err := c.plot()
	if err != nil {
		t.Fatal(err)
	}
	if len(bars) != len(c.Series) || labels == nil {
		t.Fatalf("%d bar charts and labels %v", len(bars), labels)
	}
	for s, bc := range bars {
		for i, b := range c.Bars {
			if bc.Values[i] != b.Values[s] {
				t.Errorf("series %d bar %d: %g, want %g", s, i, bc.Values[i], b.Values[s])
			}
		}
		if s > 0 && bc.BarHeight(0) != bars[s-1].BarHeight(0)+c.Bars[0].Values[s] {
			t.Errorf("series %d is not stacked on series %d", s, s-1)
		}
	}
	for i, b := range c.Bars {
		if labels.Labels[i] != c.Format(b.Total()) || labels.XYs[i].Y != b.Total() || labels.XYs[i].X != float64(i) {
			t.Errorf("bar %d: label %q at %v", i, labels.Labels[i], labels.XYs[i])
		}
	}
	if p.Y.Max <= 13 || !strings.Contains(p.Title.Text, "\n") {
		t.Errorf("y max %g, title %q", p.Y.Max, p.Title.Text)
	}
}

// TestSave writes PNG and SVG files and reads them back: a PNG of the
// requested size at 120 dpi, an SVG that parses as XML and holds the title.
func TestSave(t *testing.T) {
	dir := t.TempDir()
	c := testChart()
	c.Width, c.Height = 5*vg.Inch, 3*vg.Inch
	pngPath, svgPath := filepath.Join(dir, "c.png"), filepath.Join(dir, "c.SVG")
	if err := c.Save(pngPath); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(svgPath); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(pngPath)
	img, err := png.Decode(f)
	f.Close()
	if err != nil || img.Bounds().Dx() != 600 || img.Bounds().Dy() != 360 {
		t.Errorf("png: %v, bounds %v", err, img.Bounds())
	}
	b, _ := os.ReadFile(svgPath)
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("svg: %v", err)
		}
	}
	if !strings.Contains(string(b), "Memory") {
		t.Error("svg lacks the title")
	}
}

func TestInvalid(t *testing.T) {
	for name, mod := range map[string]func(c *Chart){
		"no series":    func(c *Chart) { c.Series = nil },
		"no bars":      func(c *Chart) { c.Bars = nil },
		"short values": func(c *Chart) { c.Bars[0].Values = c.Bars[0].Values[:2] },
		"negative":     func(c *Chart) { c.Bars[1].Values[0] = -1 },
		"NaN":          func(c *Chart) { c.Bars[1].Values[2] = math.NaN() },
	} {
		c := testChart()
		mod(c)
		if _, err := c.Plot(); !errors.Is(err, ErrChart) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := testChart().Save(filepath.Join(t.TempDir(), "c.gif")); !errors.Is(err, ErrChart) {
		t.Errorf(".gif: %v", err)
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		s     string
		width int
		want  string
	}{
		{"FP32 Adam, unsharded", 14, "FP32 Adam,\nunsharded"},
		{"Megatron --fp8-param-gather, BF16", 14, "Megatron\n--fp8-param-\ngather, BF16"},
		{"averyveryverylongword x", 5, "averyveryverylongword\nx"},
		{"", 5, ""},
	} {
		if got := Wrap(tc.s, tc.width); got != tc.want {
			t.Errorf("Wrap(%q, %d) = %q, want %q", tc.s, tc.width, got, tc.want)
		}
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		min, max float64
		want     string
	}{
		{0, 29, "0 5 10 15 20 25"},
		{0, 1.3, "0 0.2 0.4 0.6 0.8 1 1.2"},
		{0, 300, "0 50 100 150 200 250 300"},
	} {
		var got []string
		for _, tk := range (Ticks{}).Ticks(tc.min, tc.max) {
			got = append(got, tk.Label)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("[%g, %g]: %v, want %s", tc.min, tc.max, got, tc.want)
		}
	}
}
