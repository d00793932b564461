package fp8_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/distopt/distopt/fp8"
)

// Every canonical name and every Scaling constant's own name, in any case
// and with either format, reads back as that scaling and format.
func TestParseRecipeRoundTrip(t *testing.T) {
	scalings := []fp8.Scaling{fp8.TensorCurrent, fp8.TensorDelayed, fp8.Block1x128, fp8.Block128x128, fp8.MXFP8}
	if got := fp8.RecipeNames(); len(got) != len(scalings) {
		t.Fatalf("RecipeNames() = %v, want one name per Scaling (%d)", got, len(scalings))
	}
	for i, s := range scalings {
		if fp8.RecipeNames()[i] != fp8.RecipeName(s) {
			t.Errorf("RecipeNames()[%d] = %q, RecipeName(%v) = %q", i, fp8.RecipeNames()[i], s, fp8.RecipeName(s))
		}
		for _, name := range []string{fp8.RecipeName(s), strings.ToUpper(fp8.RecipeName(s)), s.String(), strings.ToLower(s.String())} {
			for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
				for _, text := range []string{name + ":" + f.String(), name + ":" + strings.ToLower(f.String())} {
					r, err := fp8.ParseRecipe(text)
					if err != nil || r != (fp8.Recipe{Format: f, Scaling: s}) {
						t.Errorf("ParseRecipe(%q) = %v, %v; want %v %v", text, r, err, f, s)
					}
				}
			}
			if r, err := fp8.ParseRecipe(" " + name + " "); err != nil || r != (fp8.Recipe{Format: fp8.E4M3, Scaling: s}) {
				t.Errorf("ParseRecipe(%q) = %v, %v; want E4M3 %v", name, r, err, s)
			}
		}
	}
}

// The names other tools use mean what those tools mean by them.
func TestParseRecipeAliases(t *testing.T) {
	for _, tc := range []struct {
		text string
		want fp8.Recipe
	}{
		{"Float8CurrentScaling", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}},
		{"DelayedScaling", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed}},
		{"Float8BlockScaling", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}},
		{"MXFP8BlockScaling", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.MXFP8}},
		{"DelayedScaling:HYBRID", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed}},
		{"float8currentscaling:e5m2", fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.TensorCurrent}},
		{"tensorwise", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}},
		{"blockwise", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}},
		{"mxfp8", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.MXFP8}},
		{"tensor", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}},
		{"1x128:e4m3fn", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}},
		{"128X128", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}},
	} {
		t.Run(tc.text, func(t *testing.T) {
			r, err := fp8.ParseRecipe(tc.text)
			if err != nil || r != tc.want {
				t.Fatalf("ParseRecipe(%q) = %v, %v; want %v", tc.text, r, err, tc.want)
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("parsed recipe does not validate: %v", err)
			}
		})
	}
}

// Anything else is an ErrRecipe that quotes the input.
func TestParseRecipeErrors(t *testing.T) {
	for _, text := range []string{"", "currentt", "current:", "current:e3m4", "nvfp4", "current:e5m2:x", ":e4m3", "Float8BlockScaling E4M3"} {
		t.Run(text, func(t *testing.T) {
			r, err := fp8.ParseRecipe(text)
			if !errors.Is(err, fp8.ErrRecipe) {
				t.Fatalf("ParseRecipe(%q) = %v, %v; want an error wrapping ErrRecipe", text, r, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", text)) {
				t.Errorf("error %q does not quote the input", err)
			}
		})
	}
	if got := fp8.RecipeName(0); got != fp8.Scaling(0).String() {
		t.Errorf("RecipeName(0) = %q", got)
	}
}

func ExampleParseRecipe() {
	for _, name := range []string{"current", "DelayedScaling", "Float8BlockScaling", "mx:e5m2"} {
		r, err := fp8.ParseRecipe(name)
		fmt.Println(r, err)
	}
	_, err := fp8.ParseRecipe("nvfp4")
	fmt.Println(err)
	// Output:
	// E4M3 TensorCurrent(margin=0, pow2=false) <nil>
	// E4M3 TensorDelayed(margin=0, pow2=false, history=1024 max) <nil>
	// E4M3 Block128x128(margin=0, pow2=false) <nil>
	// E5M2 MXFP8 <nil>
	// fp8: invalid recipe: unknown recipe name "nvfp4": want current, delayed, block, tile, mx (or an alias: see ParseRecipe), optionally followed by :E4M3 or :E5M2
}
