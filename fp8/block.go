package fp8

import "math"

// CastBlocks1D casts src block by block: for each run k of block consecutive
// elements (the last run may be shorter),
//
//	amax           = Amax(run)
//	scale, inv     = ScaleFromAmax(amax, f, margin, pow2)
//	dst[i]         = f.Encode(float32(src[i] * scale))   for i in the run
//	scaleInv[k]    = inv
//
// It serves Block1x128 (block 128) on a piece of a tensor that starts at a
// block boundary. An all-zero run gets scale 1. Large inputs are split
// across goroutines at block boundaries. It panics if block < 1, len(dst) <
// len(src), len(scaleInv) < ceil(len(src)/block) or f is invalid.
func CastBlocks1D(dst []byte, scaleInv []float32, src []float32, block int, f Format, margin int, pow2 bool) {
	checkBlocks("CastBlocks1D", len(dst), len(scaleInv), len(src), block, f)
	parallel(len(src), 0, block, func(_, lo, hi int) {
		for b := lo; b < hi; b += block {
			e := min(b+block, hi)
			run := src[b:e]
			scale, inv := ScaleFromAmax(math.Float32frombits(amaxBits(run)), f, margin, pow2)
			castScaled(dst[b:e], run, scale, f)
			scaleInv[b/block] = inv
		}
	})
}

// checkBlocks panics with a message naming fn if the buffers of a block cast
// do not fit.
func checkBlocks(fn string, nDst, nScales, nSrc, block int, f Format) {
	switch {
	case block < 1:
		panic("fp8: " + fn + ": block must be positive")
	case nDst < nSrc:
		panic("fp8: " + fn + ": dst shorter than src")
	case nScales < ceilDiv(nSrc, block):
		panic("fp8: " + fn + ": fewer scales than blocks")
	case !f.Valid():
		panic(badFormat(f))
	}
}

// TileIndex returns the index of the tile holding the element at flat index
// idx of a row-major matrix with cols columns cut into tile x tile tiles
// (edge tiles partial), tiles numbered row by row:
// (row/tile)*ceil(cols/tile) + col/tile.
func TileIndex(idx, cols, tile int) int {
	return idx/cols/tile*ceilDiv(cols, tile) + idx%cols/tile
}

// TileAmax folds the amax of each tile that src touches into amax: for the
// element src[i] at flat index offset+i of a row-major matrix with cols
// columns, amax[t] = MaxAmax(amax[t], |src[i]|) with t = TileIndex(offset+i,
// cols, tile). src is a piece of the matrix and may start and end mid-row;
// tiles the piece does not touch are left alone, so the amaxes of the pieces
// of every rank combine with MaxAmax (an all-reduce MAX of the bits). A 1-D
// tensor is one row (cols = its length). It panics if cols or tile is less
// than 1 or amax is too short.
func TileAmax(amax []float32, src []float32, offset, cols, tile int) {
	forEachTileRun(len(src), offset, cols, tile, func(t, lo, hi int) {
		amax[t] = math.Float32frombits(max(math.Float32bits(amax[t])&0x7fffffff, amaxBits(src[lo:hi])))
	})
}

// CastTiles casts a piece of a row-major matrix tile by tile: for the
// element src[i] at flat index offset+i, dst[i] = f.Encode(float32(src[i] *
// scale[t])) with t = TileIndex(offset+i, cols, tile). The scales come from
// ScaleFromAmax of the (reduced) TileAmax of each tile. It panics if cols or
// tile is less than 1, len(dst) < len(src), scale is too short or f is
// invalid.
func CastTiles(dst []byte, src []float32, offset, cols, tile int, scale []float32, f Format) {
	if len(dst) < len(src) {
		panic("fp8: CastTiles: dst shorter than src")
	}
	if !f.Valid() {
		panic(badFormat(f))
	}
	forEachTileRun(len(src), offset, cols, tile, func(t, lo, hi int) {
		castScaled(dst[lo:hi], src[lo:hi], scale[t], f)
	})
}

// forEachTileRun calls fn(t, lo, hi) for each maximal run [lo, hi) of
// [0, n) that lies in one row and one tile t, for a piece starting at flat
// index offset of a matrix with cols columns. Bands of tile rows touch
// disjoint tiles, so large pieces are split across goroutines at band
// boundaries.
func forEachTileRun(n, offset, cols, tile int, fn func(t, lo, hi int)) {
	if n == 0 {
		return
	}
	if cols < 1 || tile < 1 || offset < 0 {
		panic("fp8: tiles: cols and tile must be positive, offset non-negative")
	}
	perRow := ceilDiv(cols, tile)
	parallel(n, offset, cols*tile, func(_, lo, hi int) {
		for i := lo; i < hi; {
			idx := offset + i
			row, col := idx/cols, idx%cols
			end := min(hi, i+min(cols, (col/tile+1)*tile)-col)
			fn(row/tile*perRow+col/tile, i, end)
			i = end
		}
	})
}
