package fp8

import (
	"fmt"
	"strings"
)

// recipeName is one accepted spelling of a scaling, lower case.
type recipeName struct {
	name    string
	scaling Scaling
}

// recipeNames lists the canonical names first, one per Scaling in the
// order of the constants, then the aliases. Every entry is lower case;
// ParseRecipe compares case-insensitively.
var recipeNames = []recipeName{
	// The names of distopt's tools.
	{"current", TensorCurrent},
	{"delayed", TensorDelayed},
	{"block", Block1x128},
	{"tile", Block128x128},
	{"mx", MXFP8},
	// The Scaling constants.
	{"tensorcurrent", TensorCurrent},
	{"tensordelayed", TensorDelayed},
	{"block1x128", Block1x128},
	{"block128x128", Block128x128},
	{"mxfp8", MXFP8},
	// Transformer Engine's recipe classes (transformer_engine.common.recipe).
	// Float8BlockScaling scales weights, the tensors distopt casts, in
	// 128x128 blocks (activations and gradients in 1x128).
	{"float8currentscaling", TensorCurrent},
	{"delayedscaling", TensorDelayed},
	{"float8blockscaling", Block128x128},
	{"mxfp8blockscaling", MXFP8},
	// Megatron-LM's --fp8-recipe values (delayed and mxfp8 are above).
	{"tensorwise", TensorCurrent},
	{"blockwise", Block128x128},
	// Further short spellings.
	{"tensor", TensorCurrent},
	{"1x128", Block1x128},
	{"128x128", Block128x128},
}

// formatNames maps the accepted format spellings, lower case, to formats.
// Transformer Engine's HYBRID casts the forward tensors, weights among
// them, to E4M3 (and gradients to E5M2), so for parameters it means E4M3.
var formatNames = map[string]Format{
	"e4m3":   E4M3,
	"e4m3fn": E4M3,
	"hybrid": E4M3,
	"e5m2":   E5M2,
}

// RecipeNames returns the canonical recipe names, one per Scaling in the
// order of the constants: current, delayed, block, tile, mx.
func RecipeNames() []string {
	names := make([]string, 0, MXFP8)
	for _, n := range recipeNames[:MXFP8] {
		names = append(names, n.name)
	}
	return names
}

// RecipeName returns the canonical name of s ("current", "delayed",
// "block", "tile" or "mx"), the name ParseRecipe reads back, or s.String()
// for an invalid Scaling.
func RecipeName(s Scaling) string {
	if !s.Valid() {
		return s.String()
	}
	return recipeNames[s-1].name
}

// ParseRecipe reads a recipe from NAME or NAME:FORMAT, in any case, as every
// distopt tool reads its -recipe flag. NAME is a canonical name or an alias:
//
//	canonical  Scaling       aliases
//	current    TensorCurrent tensorcurrent, Float8CurrentScaling, tensorwise, tensor
//	delayed    TensorDelayed tensordelayed, DelayedScaling
//	block      Block1x128    block1x128, 1x128
//	tile       Block128x128  block128x128, Float8BlockScaling, blockwise, 128x128
//	mx         MXFP8         mxfp8, MXFP8BlockScaling
//
// Aliases are Scaling constants, Transformer Engine's recipe classes and
// Megatron-LM's --fp8-recipe values. FORMAT is E4M3, the default, or E5M2;
// PyTorch's e4m3fn and Transformer Engine's HYBRID mean E4M3. The result has
// no margin, no power-of-two scales and the default history, Transformer
// Engine's defaults. Errors wrap ErrRecipe.
func ParseRecipe(s string) (Recipe, error) {
	name, format, hasFormat := strings.Cut(strings.ToLower(strings.TrimSpace(s)), ":")
	r := Recipe{Format: E4M3}
	for _, n := range recipeNames {
		if n.name == name {
			r.Scaling = n.scaling
			break
		}
	}
	if r.Scaling == 0 {
		return Recipe{}, fmt.Errorf("%w: unknown recipe name %q: want %s (or an alias: see ParseRecipe), optionally followed by :E4M3 or :E5M2",
			ErrRecipe, s, strings.Join(RecipeNames(), ", "))
	}
	if hasFormat {
		f, ok := formatNames[format]
		if !ok {
			return Recipe{}, fmt.Errorf("%w: unknown format %q in recipe %q: want E4M3 or E5M2", ErrRecipe, format, s)
		}
		r.Format = f
	}
	return r, nil
}
