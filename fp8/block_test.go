package fp8

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// withSpecialBlocks overwrites block k (of size block) of s with zeros,
// block k+1 with -0 and one NaN, block k+2 with one Inf, where they exist.
func withSpecialBlocks(s []float32, block, k int) {
	fill := func(b int, edit func(run []float32)) {
		if lo := b * block; lo < len(s) {
			edit(s[lo:min(lo+block, len(s))])
		}
	}
	fill(k, func(run []float32) { clear(run) })
	fill(k+1, func(run []float32) {
		for i := range run {
			run[i] = float32(math.Copysign(0, -1))
		}
	})
	fill(k+2, func(run []float32) { run[len(run)/2] = float32(math.NaN()) })
	fill(k+3, func(run []float32) { run[0] = float32(math.Inf(-1)) })
}

func TestCastBlocks1D(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, f := range []Format{E4M3, E5M2} {
		for _, block := range []int{128, 32, 100} {
			for _, n := range []int{0, 1, 127, 128, 129, 1000, 2*parallelMin + 77} {
				t.Run(fmt.Sprintf("%v/block=%d/n=%d", f, block, n), func(t *testing.T) {
					src := specialSlice(r, n)
					withSpecialBlocks(src, block, 1)
					margin, pow2 := r.IntN(3), r.IntN(2) == 0
					dst, all := guarded(n)
					nb := (n + block - 1) / block
					scaleInv := make([]float32, nb+1)
					scaleInv[nb] = -1 // guard
					CastBlocks1D(dst, scaleInv, src, block, f, margin, pow2)
					checkGuards(t, all, n)
					if scaleInv[nb] != -1 {
						t.Fatal("write past the scales")
					}
					for k := range nb {
						run := src[k*block : min((k+1)*block, n)]
						scale, inv := refScale(refAmax(run), f, margin, pow2)
						if scaleInv[k] != inv {
							t.Fatalf("block %d: scale_inv %g, want %g", k, scaleInv[k], inv)
						}
						for i, x := range run {
							if want := f.Encode(refProduct(x, scale)); dst[k*block+i] != want {
								t.Fatalf("block %d elem %d: %#02x, want %#02x", k, i, dst[k*block+i], want)
							}
						}
					}
				})
			}
		}
	}
}

// refTile is the tile of element idx of a rows x cols matrix, from the row
// and column written out.
func refTile(idx, cols, tile int) int {
	row, col := idx/cols, idx%cols
	tilesPerRow := cols / tile
	if cols%tile != 0 {
		tilesPerRow++
	}
	return (row/tile)*tilesPerRow + col/tile
}

// randomCuts splits [0, n) into pieces at random offsets (some empty).
func randomCuts(r *rand.Rand, n, pieces int) [][2]int {
	cuts := []int{0, n}
	for range pieces - 1 {
		cuts = append(cuts, r.IntN(n+1))
	}
	slices.Sort(cuts)
	var out [][2]int
	for i := range len(cuts) - 1 {
		out = append(out, [2]int{cuts[i], cuts[i+1]})
	}
	return out
}

func TestTiles(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, sh := range [][2]int{{1, 1}, {1, 300}, {130, 33}, {128, 128}, {257, 129}, {600, 300}} {
		for _, tile := range []int{128, 32} {
			rows, cols := sh[0], sh[1]
			n := rows * cols
			t.Run(fmt.Sprintf("%dx%d/tile=%d", rows, cols, tile), func(t *testing.T) {
				src := specialSlice(r, n)
				withSpecialBlocks(src, cols, 1) // whole special rows
				ntiles := refTile(n-1, cols, tile) + 1
				want := make([]uint32, ntiles)
				for i, x := range src {
					k := refTile(i, cols, tile)
					want[k] = max(want[k], math.Float32bits(refAmax([]float32{x})))
				}
				for _, pieces := range []int{1, 3, 7} {
					amax := make([]float32, ntiles)
					for _, p := range randomCuts(r, n, pieces) {
						TileAmax(amax, src[p[0]:p[1]], p[0], cols, tile)
					}
					for k := range amax {
						if math.Float32bits(amax[k]) != want[k] {
							t.Fatalf("%d pieces: tile %d amax %#08x, want %#08x", pieces, k, math.Float32bits(amax[k]), want[k])
						}
					}
				}
				scale := make([]float32, ntiles)
				for k := range scale {
					scale[k] = float32(r.NormFloat64() * 100)
				}
				for _, f := range []Format{E4M3, E5M2} {
					dst, all := guarded(n)
					for _, p := range randomCuts(r, n, 5) {
						CastTiles(dst[p[0]:p[1]], src[p[0]:p[1]], p[0], cols, tile, scale, f)
					}
					checkGuards(t, all, n)
					for i, x := range src {
						if want := f.Encode(refProduct(x, scale[refTile(i, cols, tile)])); dst[i] != want {
							t.Fatalf("%v: elem %d: %#02x, want %#02x", f, i, dst[i], want)
						}
					}
				}
			})
		}
	}
}

func TestTileIndex(t *testing.T) {
	for _, c := range []struct{ idx, cols, tile, want int }{
		{0, 1, 128, 0},
		{299, 300, 128, 2},
		{128*300 + 5, 300, 128, 3},
		{129*33 + 32, 33, 128, 1},
		{127*200 + 199, 200, 128, 1},
	} {
		if got := TileIndex(c.idx, c.cols, c.tile); got != c.want || got != refTile(c.idx, c.cols, c.tile) {
			t.Errorf("TileIndex(%d, %d, %d) = %d, want %d", c.idx, c.cols, c.tile, got, c.want)
		}
	}
}
