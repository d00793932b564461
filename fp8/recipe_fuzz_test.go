package fp8

import (
	"errors"
	"testing"
)

// FuzzParseRecipe parses arbitrary text: no panic; an error wraps
// ErrRecipe; an accepted recipe is valid, and its canonical name with its
// format parses back to the same recipe.
func FuzzParseRecipe(f *testing.F) {
	for _, s := range []string{"current", "delayed:E5M2", "Float8BlockScaling", "MXFP8BlockScaling:e4m3fn", " tile : hybrid ", "mx:", ":e4m3", "blockwise:E5M2:x", "\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRecipe(s)
		if err != nil {
			if !errors.Is(err, ErrRecipe) {
				t.Fatalf("ParseRecipe(%q): error without ErrRecipe: %v", s, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("ParseRecipe(%q) = %+v, which Validate refuses: %v", s, r, err)
		}
		name := RecipeName(r.Scaling) + ":" + r.Format.String()
		back, err := ParseRecipe(name)
		if err != nil || back != r {
			t.Fatalf("ParseRecipe(%q) = %+v; its name %q parses to %+v, %v", s, r, name, back, err)
		}
	})
}
