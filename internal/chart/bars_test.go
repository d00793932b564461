package chart

import (
	"bytes"
	"errors"
	"image"
	"image/png"
	"math"
	"strings"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		top  float64
		want []float64
	}{
		{0, []float64{0, 1}},
		{1, []float64{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}},
		{10, []float64{0, 2, 4, 6, 8, 10}},
		{11, []float64{0, 5, 10, 15}},
		{27.5, []float64{0, 10, 20, 30}},
		{100, []float64{0, 20, 40, 60, 80, 100}},
	} {
		got := niceTicks(tc.top)
		if len(got) != len(tc.want) {
			t.Errorf("niceTicks(%v) = %v, want %v", tc.top, got, tc.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-12 {
				t.Errorf("niceTicks(%v) = %v, want %v", tc.top, got, tc.want)
				break
			}
		}
	}
}

// TestNiceTicksProperties sweeps six decades: the axis covers top, the
// step is 1, 2 or 5 times a power of ten, and there are 3 to 10 intervals.
func TestNiceTicksProperties(t *testing.T) {
	for top := 1e-3; top < 1e3; top *= 1.037 {
		ticks := niceTicks(top)
		n := len(ticks) - 1
		step := ticks[1]
		if ticks[n] < top*(1-1e-12) {
			t.Fatalf("top %g: last tick %g below it", top, ticks[n])
		}
		if n < 3 || n > 10 {
			t.Fatalf("top %g: %d intervals", top, n)
		}
		m := step / math.Pow(10, math.Floor(math.Log10(step)+1e-9))
		if math.Abs(m-1) > 1e-9 && math.Abs(m-2) > 1e-9 && math.Abs(m-5) > 1e-9 {
			t.Fatalf("top %g: step %g is not 1, 2 or 5 times a power of ten", top, step)
		}
	}
}

func TestTickLabel(t *testing.T) {
	for _, tc := range []struct {
		v, step float64
		want    string
	}{{0, 0.2, "0.0"}, {0.6000000000000001, 0.2, "0.6"}, {15, 5, "15"}, {0.05, 0.01, "0.05"}, {2000, 500, "2000"}} {
		if got := tickLabel(tc.v, tc.step); got != tc.want {
			t.Errorf("tickLabel(%v, %v) = %q, want %q", tc.v, tc.step, got, tc.want)
		}
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want []string
	}{
		{"", 5, []string{""}},
		{"FP32 Adam", 20, []string{"FP32 Adam"}},
		{"Megatron BF16 distributed optimizer", 12, []string{"Megatron", "BF16", "distributed", "optimizer"}},
		{"a b c d", 3, []string{"a b", "c d"}},
		{"abcdefgh ij", 3, []string{"abc", "def", "gh", "ij"}},
	} {
		got := wrap(tc.s, tc.n)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
		for _, l := range got {
			if len([]rune(l)) > tc.n {
				t.Errorf("wrap(%q, %d): line %q too long", tc.s, tc.n, l)
			}
		}
	}
}

func TestDrawErrors(t *testing.T) {
	ok := []Bar{{Label: "a", Values: []float64{1}}}
	for _, tc := range []struct {
		name string
		c    Bars
		want error
	}{
		{"no bars", Bars{Series: []string{"x"}}, ErrEmpty},
		{"no series", Bars{Bars: []Bar{{Label: "a"}}}, ErrEmpty},
		{"values and series differ", Bars{Series: []string{"x", "y"}, Bars: ok}, ErrValue},
		{"negative", Bars{Series: []string{"x"}, Bars: []Bar{{Values: []float64{-1}}}}, ErrValue},
		{"NaN", Bars{Series: []string{"x"}, Bars: []Bar{{Values: []float64{math.NaN()}}}}, ErrValue},
		{"infinite", Bars{Series: []string{"x"}, Bars: []Bar{{Values: []float64{math.Inf(1)}}}}, ErrValue},
		{"too small", Bars{Series: []string{"x"}, Bars: ok, Width: 60, Height: 60}, ErrSize},
		{"too many bars", Bars{Series: []string{"x"}, Bars: make([]Bar, 1000), Width: 300}, ErrValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.c.Draw(); !errors.Is(err, tc.want) {
				t.Errorf("Draw: %v, want %v", err, tc.want)
			}
		})
	}
	many := make([]Bar, 1000)
	for i := range many {
		many[i].Values = []float64{1}
	}
	c := Bars{Series: []string{"x"}, Bars: many, Width: 300}
	if _, err := c.Draw(); !errors.Is(err, ErrSize) {
		t.Errorf("1000 bars in 300 pixels: %v, want ErrSize", err)
	}
}

// runs counts, along column x of img, the pixels of each palette colour.
func runs(img *image.RGBA, x int) map[int]int {
	n := map[int]int{}
	for y := img.Rect.Min.Y; y < img.Rect.Max.Y; y++ {
		p := img.RGBAAt(x, y)
		for i, c := range Palette {
			if p == c {
				n[i]++
			}
		}
	}
	return n
}

// TestBarHeightsProportional reads the bars back from the pixels: each
// segment's height is its value times the same pixels-per-unit, to within
// the rounding of its two edges.
func TestBarHeightsProportional(t *testing.T) {
	c := Bars{
		Title:  "Memory per rank",
		Unit:   "GiB",
		Series: []string{"weights", "gradients", "state"},
		Bars: []Bar{
			{Label: "one", Values: []float64{2, 2, 12}},
			{Label: "two long label that wraps", Values: []float64{1, 2, 6}},
			{Label: "three", Values: []float64{0, 0, 3}},
		},
		Width: 900, Height: 500,
	}
	img, err := c.Draw()
	if err != nil {
		t.Fatal(err)
	}
	// The plot spans the image between the tick labels and the legend; the
	// bars sit in equal slots: find each bar's centre column by scanning for
	// the first colour of the third series (present in every bar).
	// Columns with more of it than a legend swatch's height belong to bars.
	var centres []int
	start := -1
	for x := 0; x <= img.Rect.Dx(); x++ {
		in := x < img.Rect.Dx() && runs(img, x)[2] > swatch
		switch {
		case in && start < 0:
			start = x
		case !in && start >= 0:
			centres = append(centres, (start+x)/2)
			start = -1
		}
	}
	if len(centres) != 3 {
		t.Fatalf("found %d bars, want 3", len(centres))
	}
	perUnit := float64(runs(img, centres[0])[2]) / 12
	for i, b := range c.Bars {
		got := runs(img, centres[i])
		for s, v := range b.Values {
			if math.Abs(float64(got[s])-v*perUnit) > 2 {
				t.Errorf("bar %d series %d: %d pixels, want %.1f", i, s, got[s], v*perUnit)
			}
		}
	}
}

func TestWritePNGDeterministic(t *testing.T) {
	c := Bars{Title: "t", Series: []string{"only"}, Bars: []Bar{{Label: "a", Values: []float64{3}}, {Label: "b", Values: []float64{1.5}}}, Width: 400, Height: 300}
	var a, b bytes.Buffer
	if err := c.WritePNG(&a); err != nil {
		t.Fatal(err)
	}
	if err := c.WritePNG(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two renderings differ")
	}
	img, err := png.Decode(&a)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != 400 || img.Bounds().Dy() != 300 {
		t.Errorf("size %v, want 400x300", img.Bounds())
	}
}

func TestSavePNG(t *testing.T) {
	path := t.TempDir() + "/c.png"
	c := Bars{Series: []string{"x"}, Bars: []Bar{{Label: "a", Values: []float64{1}}}}
	if err := c.SavePNG(path); err != nil {
		t.Fatal(err)
	}
	if err := c.SavePNG(t.TempDir() + "/missing/c.png"); err == nil {
		t.Error("no error for a missing directory")
	}
}

// TestSubtitleWraps checks that a long subtitle stays inside the margins
// (it wraps) instead of running off the image.
func TestSubtitleWraps(t *testing.T) {
	c := Bars{Title: "t", Subtitle: strings.Repeat("word ", 60), Series: []string{"x"}, Bars: []Bar{{Label: "a", Values: []float64{1}}}, Width: 500, Height: 400}
	img, err := c.Draw()
	if err != nil {
		t.Fatal(err)
	}
	for y := range img.Rect.Dy() {
		for x := img.Rect.Dx() - margin + 1; x < img.Rect.Dx(); x++ {
			if img.RGBAAt(x, y) == ink {
				t.Fatalf("ink at (%d,%d), inside the right margin", x, y)
			}
		}
	}
	short := c
	short.Subtitle = "word"
	a, _ := short.Draw()
	if plotRows(a) <= plotRows(img) {
		t.Errorf("a wrapped subtitle did not take room from the plot")
	}
}

// plotRows counts the rows of the first bar's colour in the image.
func plotRows(img *image.RGBA) int {
	n := 0
	for y := range img.Rect.Dy() {
		for x := range img.Rect.Dx() {
			if img.RGBAAt(x, y) == Palette[0] {
				n++
				break
			}
		}
	}
	return n
}
