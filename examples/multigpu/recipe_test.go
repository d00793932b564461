package main

import (
	"errors"
	"io"
	"testing"

	"github.com/distopt/distopt/fp8"
)

// -recipe takes the names of every distopt tool (and their aliases) and
// reaches the optimizer's configuration.
func TestRecipeFlag(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want fp8.Recipe
	}{
		{"current", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}},
		{"Float8BlockScaling", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}},
		{"MX:e5m2", fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.MXFP8}},
	} {
		o, err := parseFlags([]string{"-recipe", tc.arg}, io.Discard)
		if err != nil || o.config().Recipe != tc.want {
			t.Errorf("-recipe %s: config recipe %v, %v; want %v", tc.arg, o.config().Recipe, err, tc.want)
		}
	}
	if _, err := parseFlags([]string{"-recipe", "tensorcurent"}, io.Discard); !errors.Is(err, fp8.ErrRecipe) {
		t.Errorf("-recipe tensorcurent: %v, want an error wrapping fp8.ErrRecipe", err)
	}
}
