package kernels

import (
	"fmt"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"math"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
)

// TestTransposeFP8 transposes every shape with both sides in a set of edge
// sizes around the 64-byte tile and the 4-byte word (441 shapes), plus a
// few large ones and misaligned pointers, with every byte value present,
// and compares with the transpose on the CPU, bit for bit, with guard bands.
func TestTransposeFP8(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	sizes := []int{1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 256}
	type shape struct{ rows, cols, off int }
	var shapes []shape
	for _, r := range sizes {
		for _, c := range sizes {
			shapes = append(shapes, shape{r, c, 0})
		}
	}
	shapes = append(shapes, shape{256, 512, 0}, shape{2048, 6144, 0}, shape{192, 256, 0}, shape{4160, 768, 0}, shape{128, 128, 1}, shape{130, 68, 3})
	for _, k := range sets {
		bad := 0
		for _, sh := range shapes {
			n := sh.rows * sh.cols
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i*131 + i/256) // every value, in varying order
			}
			in := newGuarded(t, d, s, n, sh.off)
			must(t, s.Upload(in.ptr(), src))
			out := newGuarded(t, d, s, n, sh.off)
			must(t, k.TransposeFP8(s, out.ptr(), in.ptr(), sh.rows, sh.cols))
			got := out.read(t, s)
			for r := range sh.rows {
				for c := range sh.cols {
					if got[c*sh.rows+r] != src[r*sh.cols+c] {
						bad++
						if bad < 5 {
							t.Errorf("%v %dx%d+%d: dst[%d][%d] = %#x, want %#x", k.v, sh.rows, sh.cols, sh.off, c, r, got[c*sh.rows+r], src[r*sh.cols+c])
						}
					}
				}
			}
			if again := in.read(t, s); string(again) != string(src) {
				t.Errorf("%v %dx%d: the input changed", k.v, sh.rows, sh.cols)
			}
		}
		if bad > 0 {
			t.Errorf("%v: %d mismatched bytes", k.v, bad)
		}
	}
}

// TestCopyScaleGrid copies grids straight and transposed into padded rows
// and compares with the CPU, padding included (1.0).
func TestCopyScaleGrid(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	for _, k := range sets {
		for _, sh := range [][2]int{{1, 1}, {1, 5}, {3, 1}, {16, 64}, {5, 7}, {48, 3}} {
			for _, tr := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%dx%d/transpose=%t", k.v, sh[0], sh[1], tr), func(t *testing.T) {
					checkScaleGrid(t, k, s, sh[0], sh[1], tr)
				})
			}
		}
	}
}

func checkScaleGrid(t *testing.T, k *Set, s *cuda.Stream, rows, cols int, tr bool) {
	d := s.Device()
	srcLD := cols + 2
	src := make([]float32, rows*srcLD)
	for i := range src {
		src[i] = float32(i) + 0.5
	}
	outRows, outCols := rows, cols
	if tr {
		outRows, outCols = cols, rows
	}
	dstLD := (outCols + 3) / 4 * 4
	in := cudatest.Alloc(t, d, 4*len(src))
	must(t, s.Upload(in, cuda.Bytes(src)))
	out := newGuarded(t, d, s, 4*outRows*dstLD, 0)
	must(t, k.CopyScaleGrid(s, out.ptr(), dstLD, in, srcLD, rows, cols, tr))
	got := cuda.View[float32](out.read(t, s))
	for i := range outRows {
		for j := range dstLD {
			want := float32(1)
			if j < outCols {
				if tr {
					want = src[j*srcLD+i]
				} else {
					want = src[i*srcLD+j]
				}
			}
			if g := got[i*dstLD+j]; math.Float32bits(g) != math.Float32bits(want) {
				t.Fatalf("dst[%d][%d] = %v, want %v", i, j, g, want)
			}
		}
	}
}
