package kernels

import (
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
)

const (
	kernelTranspose = "fp8_transpose"
	kernelScaleGrid = "scale_grid_copy"
)

// transposeTile is the tile edge of fp8_transpose.
const transposeTile = 64

// TransposeFP8 queues on s the transpose of a row-major rows x cols matrix
// of bytes: dst[c*rows + r] = src[r*cols + c]. It is exact for any byte
// values; dst and src must not overlap. It panics for negative sizes.
func (k *Set) TransposeFP8(s *cuda.Stream, dst, src cuda.DevicePtr, rows, cols int) error {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("kernels: TransposeFP8 of %dx%d", rows, cols))
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	grid := cuda.Dim3{X: uint32((cols + transposeTile - 1) / transposeTile), Y: uint32((rows + transposeTile - 1) / transposeTile)}
	return s.Launch(k.function(kernelTranspose), grid, cuda.Dim3{X: blockSize}, 0,
		new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(rows)).U64(uint64(cols)))
}

// CopyScaleGrid queues on s the copy of a row-major rows x cols grid of
// float32 with row pitch srcLD (elements) into dst with row pitch dstLD,
// transposed when transpose is true:
//
//	transpose: dst[c*dstLD + r] = src[r*srcLD + c]   (dst is cols x dstLD)
//	else:      dst[r*dstLD + c] = src[r*srcLD + c]   (dst is rows x dstLD)
//
// Padding elements of each dst row (from the row's length to dstLD) are set
// to 1. It panics if dstLD is shorter than a dst row, or sizes are negative.
func (k *Set) CopyScaleGrid(s *cuda.Stream, dst cuda.DevicePtr, dstLD int, src cuda.DevicePtr, srcLD, rows, cols int, transpose bool) error {
	outCols := cols
	if transpose {
		outCols = rows
	}
	if rows < 0 || cols < 0 || dstLD < outCols || srcLD < cols {
		panic(fmt.Sprintf("kernels: CopyScaleGrid of %dx%d, ld %d -> %d, transpose %t", rows, cols, srcLD, dstLD, transpose))
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	tr := uint32(0)
	if transpose {
		tr = 1
	}
	n := rows * dstLD
	if transpose {
		n = cols * dstLD
	}
	return k.launch1D(s, kernelScaleGrid, n, 1, new(cuda.Args).Ptr(dst).U64(uint64(dstLD)).Ptr(src).U64(uint64(srcLD)).
		U64(uint64(rows)).U64(uint64(cols)).U32(tr))
}
