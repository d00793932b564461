package chart

import (
	"image"
	"image/color"
	"math/bits"
	"strings"
	"testing"
)

func TestFontCoversPrintableASCII(t *testing.T) {
	for r := rune(32); r < 127; r++ {
		if _, ok := font[r]; !ok {
			t.Errorf("no glyph for %q", r)
		}
	}
	if len(font) != 127-32 {
		t.Errorf("font has %d glyphs, want %d (printable ASCII only)", len(font), 127-32)
	}
}

func TestGlyphsDistinct(t *testing.T) {
	seen := map[string]rune{}
	for r, s := range glyphs {
		if other, ok := seen[s]; ok {
			t.Errorf("%q and %q have the same bitmap", r, other)
		}
		seen[s] = r
	}
}

func TestDescendersOnlyWhereExpected(t *testing.T) {
	want := map[rune]bool{'g': true, 'j': true, 'p': true, 'q': true, 'y': true, ',': true, ';': true, '_': true}
	for r, b := range font {
		if got := len(b) > glyphH; got != want[r] {
			t.Errorf("%q: descender %v, want %v", r, got, want[r])
		}
	}
}

func TestParseFontRejectsMalformed(t *testing.T) {
	for _, tc := range []struct{ name, glyph string }{
		{"too few rows", ".....|....."},
		{"too many rows", strings.Repeat(".....|", 10) + "....."},
		{"narrow row", "....|.....|.....|.....|.....|.....|....."},
		{"stray character", "..x..|.....|.....|.....|.....|.....|....."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			parseFont(map[rune]string{'a': tc.glyph})
		})
	}
}

// TestDrawTextPixels checks that drawing sets exactly scale^2 pixels per set
// font pixel, inside the text's box, for every glyph and two scales.
func TestDrawTextPixels(t *testing.T) {
	red := color.RGBA{255, 0, 0, 255}
	for _, scale := range []int{1, 3} {
		for r, b := range font {
			img := image.NewRGBA(image.Rect(0, 0, 40, 40))
			drawText(img, 2, 3, string(r), scale, red)
			want := 0
			for _, row := range b {
				want += bits.OnesCount8(row) * scale * scale
			}
			got := 0
			box := image.Rect(2, 3, 2+glyphW*scale, 3+len(b)*scale)
			for y := range 40 {
				for x := range 40 {
					if img.RGBAAt(x, y) == red {
						got++
						if !(image.Point{x, y}).In(box) {
							t.Fatalf("%q at scale %d: pixel (%d,%d) outside %v", r, scale, x, y, box)
						}
					}
				}
			}
			if got != want {
				t.Errorf("%q at scale %d: %d pixels set, want %d", r, scale, got, want)
			}
		}
	}
}

func TestUnknownRuneDrawsQuestionMark(t *testing.T) {
	a := image.NewRGBA(image.Rect(0, 0, 20, 20))
	b := image.NewRGBA(image.Rect(0, 0, 20, 20))
	drawText(a, 0, 0, "µ", 1, ink)
	drawText(b, 0, 0, "?", 1, ink)
	if string(a.Pix) != string(b.Pix) {
		t.Error("a rune outside the font is not drawn as '?'")
	}
}

func TestTextWidth(t *testing.T) {
	for _, tc := range []struct {
		s     string
		scale int
		want  int
	}{{"", 2, 0}, {"a", 1, 5}, {"ab", 1, 11}, {"abc", 2, 34}, {"µs", 1, 11}} {
		if got := textWidth(tc.s, tc.scale); got != tc.want {
			t.Errorf("textWidth(%q, %d) = %d, want %d", tc.s, tc.scale, got, tc.want)
		}
	}
}
