package fp8

import (
	"fmt"
	"strconv"
)

// Scaling selects how a recipe derives its scales.
type Scaling uint8

const (
	// TensorCurrent is per-tensor current scaling: one scale per tensor,
	// derived by ScaleFromAmax from the amax of the tensor being cast.
	TensorCurrent Scaling = iota + 1
	// TensorDelayed is per-tensor delayed scaling: one scale per tensor,
	// derived from an AmaxHistory of earlier casts (see AmaxHistory).
	TensorDelayed
	// Block1x128 gives one float32 scale to each run of 128 consecutive
	// elements of the flattened tensor (the last run may be shorter), each
	// derived by ScaleFromAmax from the run's own amax (see CastBlocks1D).
	Block1x128
	// Block128x128 gives one float32 scale to each 128x128 tile of the
	// tensor viewed as a row-major matrix (edge tiles partial); see
	// CastTiles.
	Block128x128
	// MXFP8 is OCP MX: one E8M0 (power-of-two) scale per run of 32
	// consecutive elements (see CastMX).
	MXFP8
)

var scalingNames = [...]string{
	TensorCurrent: "TensorCurrent",
	TensorDelayed: "TensorDelayed",
	Block1x128:    "Block1x128",
	Block128x128:  "Block128x128",
	MXFP8:         "MXFP8",
}

// Valid reports whether s is one of the Scaling constants.
func (s Scaling) Valid() bool { return s >= TensorCurrent && s <= MXFP8 }

// String returns the constant's name, or "Scaling(n)".
func (s Scaling) String() string {
	if !s.Valid() {
		return "Scaling(" + strconv.Itoa(int(s)) + ")"
	}
	return scalingNames[s]
}

// HistoryReduce selects how delayed scaling reduces its amax history.
type HistoryReduce uint8

const (
	// HistoryMax uses the maximum amax of the history (Transformer Engine's
	// "max"); it is the default.
	HistoryMax HistoryReduce = iota
	// HistoryMostRecent uses the most recently pushed amax
	// ("most_recent").
	HistoryMostRecent
)

// String returns "max" or "most_recent" (Transformer Engine's names), or
// "HistoryReduce(n)".
func (h HistoryReduce) String() string {
	switch h {
	case HistoryMax:
		return "max"
	case HistoryMostRecent:
		return "most_recent"
	}
	return "HistoryReduce(" + strconv.Itoa(int(h)) + ")"
}

// DefaultHistoryLen is the amax history length of delayed scaling when
// Recipe.HistoryLen is 0.
const DefaultHistoryLen = 1024

// MaxMargin bounds |Recipe.Margin|.
const MaxMargin = 127

// Recipe describes how a tensor is cast to FP8. The zero value is not
// valid: Format and Scaling must be set.
type Recipe struct {
	Format  Format
	Scaling Scaling
	// Margin divides per-tensor and 1x128/128x128 block scales by 2^Margin
	// (see ScaleFromAmax); it must be 0 for MXFP8 and within ±MaxMargin.
	Margin int
	// PowerOf2 rounds per-tensor and 1x128/128x128 block scales down to a
	// power of two. MXFP8 scales are powers of two by construction; the
	// field is ignored there.
	PowerOf2 bool
	// HistoryLen is the amax history length of TensorDelayed (0 means
	// DefaultHistoryLen); it must be 0 for the other recipes.
	HistoryLen int
	// HistoryReduce is the history reduction of TensorDelayed; it must be
	// HistoryMax (the zero value) for the other recipes.
	HistoryReduce HistoryReduce
}

// Validate returns nil for a usable recipe, or an error wrapping ErrRecipe
// that names the offending field.
func (r Recipe) Validate() error {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s = %v: %s", ErrRecipe, field, v, why)
	}
	switch {
	case !r.Format.Valid():
		return bad("Format", r.Format, "want E4M3 or E5M2")
	case !r.Scaling.Valid():
		return bad("Scaling", r.Scaling, "want one of the Scaling constants")
	case r.Scaling == MXFP8 && r.Margin != 0:
		return bad("Margin", r.Margin, "MXFP8 scales take no margin")
	case r.Margin < -MaxMargin || r.Margin > MaxMargin:
		return bad("Margin", r.Margin, fmt.Sprintf("want at most %d in magnitude", MaxMargin))
	case r.HistoryLen < 0:
		return bad("HistoryLen", r.HistoryLen, "must not be negative")
	case r.Scaling != TensorDelayed && r.HistoryLen != 0:
		return bad("HistoryLen", r.HistoryLen, "only delayed scaling keeps a history")
	case r.HistoryReduce != HistoryMax && r.HistoryReduce != HistoryMostRecent:
		return bad("HistoryReduce", r.HistoryReduce, "want HistoryMax or HistoryMostRecent")
	case r.Scaling != TensorDelayed && r.HistoryReduce != HistoryMax:
		return bad("HistoryReduce", r.HistoryReduce, "only delayed scaling keeps a history")
	}
	return nil
}

// Block returns the block shape of the recipe's scales: (0, 0) for the
// per-tensor recipes, (1, 128), (128, 128) and (1, 32) for Block1x128,
// Block128x128 and MXFP8.
func (r Recipe) Block() (rows, cols int) {
	switch r.Scaling {
	case Block1x128:
		return 1, 128
	case Block128x128:
		return 128, 128
	case MXFP8:
		return 1, 32
	}
	return 0, 0
}

// History returns the effective amax history length: HistoryLen, or
// DefaultHistoryLen when it is 0.
func (r Recipe) History() int {
	if r.HistoryLen == 0 {
		return DefaultHistoryLen
	}
	return r.HistoryLen
}

// NumScales returns how many scales (and amaxes) a tensor of the given
// shape has under the recipe: 1 per tensor; ceil(n/128) for Block1x128 and
// ceil(n/32) for MXFP8, n the number of elements; ceil(rows/128) *
// ceil(cols/128) for Block128x128, with the shape viewed as a matrix by
// Matrix. These are the amaxes the recipe may need to all-reduce.
func (r Recipe) NumScales(shape []int) int {
	n := numElements(shape)
	switch r.Scaling {
	case Block1x128:
		return ceilDiv(n, 128)
	case MXFP8:
		return ceilDiv(n, 32)
	case Block128x128:
		rows, cols := Matrix(shape)
		return ceilDiv(rows, 128) * ceilDiv(cols, 128)
	}
	return 1
}

// String describes the recipe, for example "E4M3 TensorDelayed(margin=0,
// pow2=false, history=1024 max)".
func (r Recipe) String() string {
	switch r.Scaling {
	case MXFP8:
		return fmt.Sprintf("%v %v", r.Format, r.Scaling)
	case TensorDelayed:
		return fmt.Sprintf("%v %v(margin=%d, pow2=%t, history=%d %v)",
			r.Format, r.Scaling, r.Margin, r.PowerOf2, r.History(), r.HistoryReduce)
	}
	return fmt.Sprintf("%v %v(margin=%d, pow2=%t)", r.Format, r.Scaling, r.Margin, r.PowerOf2)
}

// Matrix views a shape as a row-major matrix: the last dimension gives the
// columns, the product of the others the rows. A 1-D shape is one row; an
// empty shape (a scalar) is 1x1.
func Matrix(shape []int) (rows, cols int) {
	if len(shape) == 0 {
		return 1, 1
	}
	return numElements(shape[:len(shape)-1]), shape[len(shape)-1]
}

// numElements returns the product of the dimensions (1 for a scalar).
func numElements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
