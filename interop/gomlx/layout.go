package gomlxinterop

import "fmt"

// Layout says how a GoMLX variable's values map onto distopt's parameter.
type Layout int

const (
	// AsIs gives distopt the variable's shape and row-major order.
	AsIs Layout = iota
	// Transposed gives distopt the variable with its first axis moved last:
	// a Dense weight [in, out] becomes [out, in] (and [in, o1, o2] becomes
	// [o1, o2, in]), so that block scales run along in.
	Transposed
)

// String returns "as-is" or "transposed".
func (l Layout) String() string {
	switch l {
	case AsIs:
		return "as-is"
	case Transposed:
		return "transposed"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// shapeFor returns distopt's shape of a variable of GoMLX shape dims.
func (l Layout) shapeFor(dims []int) []int {
	out := append([]int(nil), dims...)
	if l == Transposed {
		out = append(out[1:], dims[0])
	}
	return out
}

// split returns the rows and columns of a variable of GoMLX shape dims
// viewed for a transpose: the first axis, and the product of the others.
func split(dims []int) (rows, cols int) {
	cols = 1
	for _, d := range dims[1:] {
		cols *= d
	}
	return dims[0], cols
}

// eachTransposed calls fn(from, to) for every element of a rows x cols
// row-major matrix: from is its flat index, to the flat index of the same
// element in the cols x rows transpose (c*rows+r). It walks 32x32 tiles so
// that both sides stay in cache.
func eachTransposed(rows, cols int, fn func(from, to int)) {
	const tile = 32
	for r0 := 0; r0 < rows; r0 += tile {
		for c0 := 0; c0 < cols; c0 += tile {
			for r := r0; r < min(r0+tile, rows); r++ {
				for c := c0; c < min(c0+tile, cols); c++ {
					fn(r*cols+c, c*rows+r)
				}
			}
		}
	}
}
