package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
)

// colSumsHost adds to dst[i] (and dst2[i] when dst2 is not nil) the
// column sums of gptcols.cu in its order, in float32: per chunk of
// colChunk rows, group g sums rows g, g+colGroups, ... in order, the
// groups' sums are added in order g = 0, 1, ..., and the chunks' in order
// from 0. term(r, i) is row r's term of column i; term2 dst2's.
func colSumsHost(dst, dst2 []float32, rows, n int, term, term2 func(r, i int) float32) {
	chunks := ceilDiv(rows, colChunk)
	sum := func(i int, term func(r, i int) float32) float32 {
		var total float32
		for c := range chunks {
			var t float32
			for g := range colGroups {
				var acc float32
				for r := c*colChunk + g; r < min(rows, (c+1)*colChunk); r += colGroups {
					acc += term(r, i)
				}
				t += acc
			}
			total += t
		}
		return total
	}
	for i := range n {
		dst[i] += sum(i, term)
		if dst2 != nil {
			dst2[i] += sum(i, term2)
		}
	}
}

// TestGPUColumnSumOrder checks GPTColumnSum and GPTLayerNormGradWB bit for
// bit against colSumsHost, added onto non-zero sums, in every variant the
// device loads: 38 chunks of rows (gpt_column_sum_final's loads in two
// batches and a tail), 16 (one batch), 64 (16384 rows, the 124M shape's)
// and 2 (a tail alone), over widths of whole and partial column blocks.
func TestGPUColumnSumOrder(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	r := rand.New(rand.NewPCG(31, 32))
	for _, sh := range [][2]int{{37*colChunk + 5, 768}, {16 * colChunk, 70}, {16384, 96}, {300, 100}} {
		rows, n := sh[0], sh[1]
		vals := func(k int) []float32 {
			v := make([]float32, k)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			return v
		}
		dy, x, mean, rstd, w0, b0 := vals(rows*n), vals(rows*n), vals(rows), vals(rows), vals(n), vals(n)
		up := func(v []float32) cuda.DevicePtr {
			p := cudatest.Alloc(t, d, 4*len(v))
			must(t, s.Upload(p, cuda.Bytes(v)))
			return p
		}
		dyp, xp, mp, rp := up(dy), up(x), up(mean), up(rstd)
		db := func(r, i int) float32 { return dy[r*n+i] }
		dw := func(r, i int) float32 { return float32(dy[r*n+i] * float32((x[r*n+i]-mean[r])*rstd[r])) }
		for _, k := range sets {
			wp, bp := up(w0), up(b0)
			must(t, k.GPTColumnSum(s, bp, dyp, rows, n))
			wantB := append([]float32(nil), b0...)
			colSumsHost(wantB, nil, rows, n, db, nil)
			colsMatch(t, k, "GPTColumnSum", rows, n, s, bp, wantB)
			bp = up(b0)
			must(t, k.GPTLayerNormGradWB(s, wp, bp, dyp, xp, mp, rp, rows, n))
			wantW := append([]float32(nil), w0...)
			wantB = append([]float32(nil), b0...)
			colSumsHost(wantW, wantB, rows, n, dw, db)
			colsMatch(t, k, "GPTLayerNormGradWB dw", rows, n, s, wp, wantW)
			colsMatch(t, k, "GPTLayerNormGradWB db", rows, n, s, bp, wantB)
		}
	}
}

// colsMatch checks the len(want) floats at p bit for bit against want.
func colsMatch(t *testing.T, k *Set, name string, rows, n int, s *cuda.Stream, p cuda.DevicePtr, want []float32) {
	t.Helper()
	got := make([]float32, len(want))
	must(t, s.Download(cuda.Bytes(got), p))
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%v: %s of %d x %d: [%d] = %v, want %v", k.lib.Variant(), name, rows, n, i, got[i], want[i])
		}
	}
}
