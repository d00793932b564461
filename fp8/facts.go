package fp8

import "strconv"

// This file holds the facts about a recipe that the code storing, casting
// and reporting FP8 tensors needs (bytes per element, where scales come
// from, what type they are stored as), so that those places ask the recipe
// instead of switching on its Scaling. A new recipe or format answers here.

// ScaleType is how a recipe stores the scale_inv of one tensor, block or
// tile.
type ScaleType uint8

const (
	// ScaleFloat32 stores scale_inv as a float32.
	ScaleFloat32 ScaleType = iota + 1
	// ScaleE8M0 stores the scale as one E8M0 byte, a power of two (see
	// E8M0Value); scale_inv is its value.
	ScaleE8M0
)

// Size returns the bytes of one stored scale: 4 or 1.
func (t ScaleType) Size() int {
	if t == ScaleE8M0 {
		return 1
	}
	return 4
}

// String returns "float32" or "e8m0", or "ScaleType(n)".
func (t ScaleType) String() string {
	switch t {
	case ScaleFloat32:
		return "float32"
	case ScaleE8M0:
		return "e8m0"
	}
	return "ScaleType(" + strconv.Itoa(int(t)) + ")"
}

// ScaleSource says where the scales of a recipe come from.
type ScaleSource uint8

const (
	// FromCurrent derives each scale from the amax of the values being cast
	// (per tensor, per 128x128 tile), all-reduced across ranks first.
	FromCurrent ScaleSource = iota + 1
	// FromHistory derives each scale from the amax history of earlier casts
	// (delayed scaling); the amax of this cast joins the history afterwards.
	FromHistory
	// FromBlock derives each scale from the amax of its own 1-D block,
	// which one rank holds whole: no all-reduce (see LocalBlocks).
	FromBlock
)

// ScaleSource returns where the recipe's scales come from: FromHistory for
// TensorDelayed, FromBlock for the LocalBlocks recipes, FromCurrent
// otherwise.
func (r Recipe) ScaleSource() ScaleSource {
	switch {
	case r.Scaling == TensorDelayed:
		return FromHistory
	case r.LocalBlocks():
		return FromBlock
	}
	return FromCurrent
}

// Bits returns the bits of one element of the format (8 for E4M3 and E5M2).
func (f Format) Bits() int { return 8 }

// DataBytes returns the bytes that n elements take in the recipe's format:
// n*Bits/8, rounded up.
func (r Recipe) DataBytes(n int) int { return ceilDiv(n*r.Format.Bits(), 8) }

// ScaleType returns how the recipe stores its scales: E8M0 bytes for MXFP8,
// float32 scale_inv otherwise.
func (r Recipe) ScaleType() ScaleType {
	if r.Scaling == MXFP8 {
		return ScaleE8M0
	}
	return ScaleFloat32
}

// LocalBlocks reports whether each scale derives from the amax of its own
// 1-D block of consecutive elements (Block1x128, MXFP8), so that a rank
// owning whole blocks casts them without any all-reduce and the scales are
// stored beside the data, one per block, in block order. The other recipes
// derive their scales from amaxes all-reduced across ranks (see AmaxSlots).
func (r Recipe) LocalBlocks() bool {
	rows, cols := r.Block()
	return rows == 1 && cols > 0
}

// AmaxSlots returns how many amaxes a tensor of the given shape contributes
// to the all-reduce of its scales: 0 for LocalBlocks recipes, NumScales
// otherwise (one per tensor, one per 128x128 tile).
func (r Recipe) AmaxSlots(shape []int) int {
	if r.LocalBlocks() {
		return 0
	}
	return r.NumScales(shape)
}

// BlockScaleBytes returns the bytes of the stored scales of n consecutive
// elements of a LocalBlocks recipe, n a multiple of the block or the whole
// tensor: ceil(n/block) scales of ScaleType().Size() bytes. It is 0 for the
// other recipes.
func (r Recipe) BlockScaleBytes(n int) int {
	if !r.LocalBlocks() {
		return 0
	}
	_, cols := r.Block()
	return ceilDiv(n, cols) * r.ScaleType().Size()
}
