package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// TestTileSegments checks the 128x128 tile paths of Update (tile amax) and
// CastSegments (which moves each thread's position forward instead of
// dividing per element) against fp8.TileAmax and fp8.CastTiles on matrices the
// optimizer's conformance suite does not reach: columns around and above
// the 1024 elements a pass moves (the kernels advance a thread's row and
// column without dividing there), whole and partial chunks, offsets that
// split tiles, vectors and warps, shards not 16-byte aligned, and a flat
// offset past 2^32 (the 64-bit division).
func TestTileSegments(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	cases := []struct {
		cols, paramOff, n, off int
	}{
		{4096, 0, 64*4096 + 100, 0},
		{4096, 128*4096 - 3*4096 - 64, 5*4096 + 7, 4},
		{1000, 37, 300001, 0},
		{1024, 128*1024 - 5, 200000, 8},
		{1025, 4, 150000, 0},
		{1500, 3, 250000, 1},
		{5000, 4*5000*128 - 640, 120000, 0},
		{131, 0, 100000, 0},
		{128, 64, 70000, 12},
		{1 << 20, 1<<20 - 2000, 40000, 0},
		{4096, 1 << 33, 3*4096 + 9, 0},
	}
	for _, k := range sets {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%v/cols=%d/param_off=%d/n=%d/off=%d", k.v, c.cols, c.paramOff, c.n, c.off), func(t *testing.T) {
				checkTiles(t, k, s, c.cols, c.paramOff, c.n, c.off)
			})
		}
	}
}

func checkTiles(t *testing.T, k *Set, s *cuda.Stream, cols, paramOff, n, off int) {
	d := k.Device()
	const slot = 3 // the segment's first tile slot
	first := fp8.TileIndex(paramOff, cols, 128)
	ntiles := tileSlots(cols, paramOff, n)
	r := rand.New(rand.NewPCG(uint64(cols), uint64(n)))
	x := testValues(n, uint64(cols*7+off))
	for i := range x { // mostly finite, so that most tiles have a finite amax
		if r.IntN(64) != 0 && (math.IsNaN(float64(x[i])) || math.IsInf(float64(x[i]), 0)) {
			x[i] = float32(r.NormFloat64())
		}
	}
	master := cudatest.Alloc(t, d, 4*(off+n))
	must(t, s.Upload(master.Add(4*off), cuda.Bytes(x)))

	// The amax table holds keys from earlier pieces: zero or random.
	preset := make([]uint32, slot+ntiles)
	for i := range preset {
		if r.IntN(3) == 0 {
			preset[i] = r.Uint32() & 0x3fffffff
		}
	}
	amax := cudatest.Alloc(t, d, 4*len(preset))
	must(t, s.Upload(amax, cuda.Bytes(preset)))
	table := PackSegments([]Segment{{Off: off, Len: n, Mode: ModeTile, Slot: slot, ParamOffset: paramOff, Cols: cols}})
	tp := cudatest.Alloc(t, d, len(table.Bytes))
	must(t, s.Upload(tp, table.Bytes))
	must(t, k.Update(s, &UpdateLaunch{Rule: RuleNone, Master: master, Table: table, TablePtr: tp, Format: fp8.E4M3, Amax: amax}))
	got := make([]uint32, len(preset))
	must(t, s.Download(cuda.Bytes(got), amax))

	want := make([]float32, ntiles)
	for i := range want {
		want[i] = math.Float32frombits(preset[slot+i])
	}
	fp8.TileAmax(want, x, paramOff, cols, 128)
	bad := 0
	for i := range got {
		w := preset[i]
		if i >= slot {
			w = math.Float32bits(want[i-slot])
		}
		if got[i] != w && bad < 5 {
			bad++
			t.Errorf("amax slot %d (tile %d, first %d): gpu %#08x, cpu %#08x", i, i-slot, first, got[i], w)
		}
	}

	scales := make([]float32, len(preset))
	for i := range scales {
		scales[i], _ = fp8.ScaleFromAmax(math.Float32frombits(got[i]), fp8.E4M3, r.IntN(3), r.IntN(2) == 0)
	}
	sp := cudatest.Alloc(t, d, 4*len(scales))
	must(t, s.Upload(sp, cuda.Bytes(scales)))
	for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
		dst := newGuarded(t, d, s, n, off)
		must(t, k.CastSegments(s, dst.ptr().Add(-off), master, table, tp, sp, f, 0))
		out := dst.read(t, s)
		ref := make([]byte, n)
		fp8.CastTiles(ref, x, paramOff, cols, 128, scales[slot:], f)
		if i := firstDiff(out, ref); i >= 0 {
			t.Errorf("CastSegments %v [%d] %#08x (tile %d): gpu %#02x, cpu %#02x", f, i, math.Float32bits(x[i]),
				fp8.TileIndex(paramOff+i, cols, 128), out[i], ref[i])
		}
	}
}

// tileSlots is the number of tile slots a piece of n elements from flat
// index paramOff of a matrix of cols columns needs: every tile up to the
// end of the piece's last row of tiles.
func tileSlots(cols, paramOff, n int) int {
	perRow := (cols + 127) / 128
	return (fp8.TileIndex(paramOff+n-1, cols, 128)/perRow + 1) * perRow
}

// TestTileSegmentsManyChunks checks the tile amax of Update on a table of
// several matrices with thousands of chunks (the kernels take the chunks in
// the order of chunk_order, not one after the other): rows of one chunk
// (4096 columns), part of one (8192), two chunks (2048), tiles cut between
// the lanes of a warp (the offset 64) and a matrix that does not start on
// a row. Each matrix's slots start where the previous one's end.
func TestTileSegmentsManyChunks(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	mats := []struct{ cols, paramOff, n int }{
		{4096, 0, 10 << 20},
		{8192, 8192 * 100, 3<<20 + 12},
		{2048, 64, 3 << 20},
		{4096, 4096*128 - 4, 1<<20 + 3},
	}
	var segs []Segment
	var xs [][]float32
	off, slots := 0, 0
	for i, m := range mats {
		x := testValues(m.n, uint64(100+i))
		for j := range x {
			if math.IsNaN(float64(x[j])) || math.IsInf(float64(x[j]), 0) {
				x[j] = float32(j%1000) * 0.25
			}
		}
		xs = append(xs, x)
		segs = append(segs, Segment{Off: off, Len: m.n, Mode: ModeTile, Slot: uint32(slots), ParamOffset: m.paramOff, Cols: m.cols})
		off += m.n
		slots += tileSlots(m.cols, m.paramOff, m.n)
	}
	all := make([]float32, 0, off)
	for _, x := range xs {
		all = append(all, x...)
	}
	table := PackSegments(segs)
	if table.Chunks < 64*64 {
		t.Fatalf("%d chunks, want at least 4096", table.Chunks)
	}
	for _, k := range sets {
		t.Run(k.v.String(), func(t *testing.T) {
			master := cudatest.Alloc(t, d, 4*off)
			must(t, s.Upload(master, cuda.Bytes(all)))
			amax := cudatest.Alloc(t, d, 4*slots)
			must(t, s.Upload(amax, cuda.Bytes(make([]uint32, slots))))
			tp := cudatest.Alloc(t, d, len(table.Bytes))
			must(t, s.Upload(tp, table.Bytes))
			must(t, k.Update(s, &UpdateLaunch{Rule: RuleNone, Master: master, Table: table, TablePtr: tp, Format: fp8.E4M3, Amax: amax}))
			got := make([]uint32, slots)
			must(t, s.Download(cuda.Bytes(got), amax))
			bad := 0
			for i, m := range mats {
				want := make([]float32, tileSlots(m.cols, m.paramOff, m.n))
				fp8.TileAmax(want, xs[i], m.paramOff, m.cols, 128)
				for j, w := range want {
					if g := got[int(segs[i].Slot)+j]; g != math.Float32bits(w) && bad < 10 {
						bad++
						t.Errorf("matrix %d (cols %d), tile %d: gpu %#08x, cpu %#08x", i, m.cols, j, g, math.Float32bits(w))
					}
				}
			}
		})
	}
}
