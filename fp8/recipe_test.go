package fp8

import (
	"errors"
	"strings"
	"testing"
)

func TestRecipeValidate(t *testing.T) {
	cases := []struct {
		name  string
		r     Recipe
		field string // "" for a valid recipe
	}{
		{"current", Recipe{Format: E4M3, Scaling: TensorCurrent, Margin: 1, PowerOf2: true}, ""},
		{"delayed default history", Recipe{Format: E5M2, Scaling: TensorDelayed}, ""},
		{"delayed most recent", Recipe{Format: E4M3, Scaling: TensorDelayed, HistoryLen: 16, HistoryReduce: HistoryMostRecent}, ""},
		{"1x128", Recipe{Format: E4M3, Scaling: Block1x128, Margin: 2}, ""},
		{"128x128", Recipe{Format: E4M3, Scaling: Block128x128, PowerOf2: true}, ""},
		{"mxfp8", Recipe{Format: E5M2, Scaling: MXFP8}, ""},
		{"zero value", Recipe{}, "Format"},
		{"bad format", Recipe{Format: 7, Scaling: TensorCurrent}, "Format"},
		{"no scaling", Recipe{Format: E4M3}, "Scaling"},
		{"bad scaling", Recipe{Format: E4M3, Scaling: 9}, "Scaling"},
		{"mxfp8 with margin", Recipe{Format: E4M3, Scaling: MXFP8, Margin: 1}, "Margin"},
		{"margin too large", Recipe{Format: E4M3, Scaling: TensorCurrent, Margin: 200}, "Margin"},
		{"negative history", Recipe{Format: E4M3, Scaling: TensorDelayed, HistoryLen: -1}, "HistoryLen"},
		{"history without delayed", Recipe{Format: E4M3, Scaling: TensorCurrent, HistoryLen: 4}, "HistoryLen"},
		{"bad reduce", Recipe{Format: E4M3, Scaling: TensorDelayed, HistoryReduce: 5}, "HistoryReduce"},
		{"reduce without delayed", Recipe{Format: E4M3, Scaling: Block1x128, HistoryReduce: HistoryMostRecent}, "HistoryReduce"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.r.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrRecipe) || !strings.Contains(err.Error(), c.field+" =") {
				t.Fatalf("Validate() = %v, want ErrRecipe naming %s", err, c.field)
			}
		})
	}
}

func TestRecipeShape(t *testing.T) {
	cases := []struct {
		s          Scaling
		rows, cols int
		shape      []int
		scales     int
	}{
		{TensorCurrent, 0, 0, []int{300, 7}, 1},
		{TensorDelayed, 0, 0, nil, 1},
		{Block1x128, 1, 128, []int{3, 100}, 3},
		{Block1x128, 1, 128, []int{0}, 0},
		{Block128x128, 128, 128, []int{257, 129}, 6},
		{Block128x128, 128, 128, []int{300}, 3},       // 1-D: one row
		{Block128x128, 128, 128, []int{2, 3, 200}, 2}, // 6 rows of 200
		{Block128x128, 128, 128, nil, 1},              // scalar: 1x1
		{MXFP8, 1, 32, []int{33}, 2},
	}
	for _, c := range cases {
		r := Recipe{Format: E4M3, Scaling: c.s}
		if rows, cols := r.Block(); rows != c.rows || cols != c.cols {
			t.Errorf("%v.Block() = %d, %d, want %d, %d", c.s, rows, cols, c.rows, c.cols)
		}
		if got := r.NumScales(c.shape); got != c.scales {
			t.Errorf("%v.NumScales(%v) = %d, want %d", c.s, c.shape, got, c.scales)
		}
	}
}

func TestRecipeString(t *testing.T) {
	for _, c := range []struct {
		r    Recipe
		want string
	}{
		{Recipe{Format: E4M3, Scaling: TensorDelayed}, "E4M3 TensorDelayed(margin=0, pow2=false, history=1024 max)"},
		{Recipe{Format: E5M2, Scaling: Block128x128, Margin: 1, PowerOf2: true}, "E5M2 Block128x128(margin=1, pow2=true)"},
		{Recipe{Format: E4M3, Scaling: MXFP8}, "E4M3 MXFP8"},
		{Recipe{Format: 0, Scaling: 0}, "Format(0) Scaling(0)(margin=0, pow2=false)"},
	} {
		if got := c.r.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}
