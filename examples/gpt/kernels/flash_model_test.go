package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/distopt/distopt/bf16"
)

// flashIn is the input of one attention call in float64, packed
// [batch·heads, seq, D] like the kernels' bfloat16 tensors (every value a
// bfloat16, so that the kernels read exactly these numbers).
type flashIn struct {
	sh          FlashShape
	scale       float64
	q, k, v, dO []float64
}

// flashOut is what the kernels compute, packed like flashIn.
type flashOut struct {
	o, lse, dq, dk, dv []float64
}

// newFlashIn draws q and k of standard deviation std (peakier softmax as
// std grows), v and dO of 1, rounded to bfloat16.
func newFlashIn(r *rand.Rand, sh FlashShape, std float64) *flashIn {
	n := sh.Rows() * sh.D
	draw := func(s float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(bf16.Round(float32(s * r.NormFloat64())))
		}
		return x
	}
	return &flashIn{sh: sh, scale: float64(float32(1 / math.Sqrt(float64(sh.D)))), q: draw(std), k: draw(std), v: draw(1), dO: draw(1)}
}

func dot64(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// refFlash is causal attention and its gradient in float64, row by row:
// the plain definition the kernels are held to.
func refFlash(in *flashIn) flashOut {
	sh, D := in.sh, in.sh.D
	n := sh.Rows()
	out := flashOut{o: make([]float64, n*D), lse: make([]float64, n), dq: make([]float64, n*D), dk: make([]float64, n*D), dv: make([]float64, n*D)}
	row := func(x []float64, bh, i int) []float64 { return x[(bh*sh.Seq+i)*D : (bh*sh.Seq+i+1)*D] }
	p := make([]float64, sh.Seq)
	for bh := range sh.Batch * sh.Heads {
		for i := range sh.Seq {
			mx := math.Inf(-1)
			for j := 0; j <= i; j++ {
				p[j] = in.scale * dot64(row(in.q, bh, i), row(in.k, bh, j))
				mx = max(mx, p[j])
			}
			sum := 0.0
			for j := 0; j <= i; j++ {
				p[j] = math.Exp(p[j] - mx)
				sum += p[j]
			}
			out.lse[bh*sh.Seq+i] = mx + math.Log(sum)
			o := row(out.o, bh, i)
			dsum := 0.0
			for j := 0; j <= i; j++ {
				p[j] /= sum
				dp := dot64(row(in.dO, bh, i), row(in.v, bh, j))
				dsum += p[j] * dp
				for c := range D {
					o[c] += p[j] * row(in.v, bh, j)[c]
				}
			}
			for j := 0; j <= i; j++ {
				ds := p[j] * (dot64(row(in.dO, bh, i), row(in.v, bh, j)) - dsum)
				for c := range D {
					row(out.dq, bh, i)[c] += in.scale * ds * row(in.k, bh, j)[c]
					row(out.dk, bh, j)[c] += in.scale * ds * row(in.q, bh, i)[c]
					row(out.dv, bh, j)[c] += p[j] * row(in.dO, bh, i)[c]
				}
			}
		}
	}
	return out
}

// tileModel runs the loops of flash.cu's kernels in float64: the same
// tiles, the same order of tiles, the same masks and the same ragged
// edges (rows beyond seq read as zeros, computed, never stored), the
// online softmax of the forward kernel, and the two backward kernels.
// With round set it also rounds where the kernels round to bfloat16 (the
// probabilities before P·V and Pᵀ·dO, the score gradient before dS·K and
// dSᵀ·Q, the output kept for the backward pass), which bounds what the
// bfloat16 products cost. visits counts, per kernel, the (query, key)
// pairs computed inside the causal triangle, and tiles the tiles visited.
type tileModel struct {
	in     *flashIn
	round  bool
	visits [3]int // forward, dK/dV, dQ
	tiles  [3]int
}

func (m *tileModel) rnd(x float64) float64 {
	if m.round {
		return float64(bf16.Round(float32(x)))
	}
	return x
}

// at returns row i of head bh of x, zeros beyond seq.
func (m *tileModel) at(x []float64, bh, i int) []float64 {
	sh := m.in.sh
	if i >= sh.Seq {
		return make([]float64, sh.D)
	}
	return x[(bh*sh.Seq+i)*sh.D : (bh*sh.Seq+i+1)*sh.D]
}

func (m *tileModel) run() flashOut {
	sh := m.in.sh
	n := sh.Rows()
	out := flashOut{o: make([]float64, n*sh.D), lse: make([]float64, n), dq: make([]float64, n*sh.D),
		dk: make([]float64, n*sh.D), dv: make([]float64, n*sh.D)}
	tiles := (sh.Seq + flashRows - 1) / flashRows
	for bh := range sh.Batch * sh.Heads {
		for t := range tiles {
			m.forward(&out, bh, t)
		}
	}
	o16 := out.o
	if m.round {
		o16 = make([]float64, len(out.o))
		for i, x := range out.o {
			o16[i] = m.rnd(x)
		}
	}
	dsum := make([]float64, n)
	for r := range n {
		dsum[r] = dot64(m.in.dO[r*sh.D:(r+1)*sh.D], o16[r*sh.D:(r+1)*sh.D])
	}
	for bh := range sh.Batch * sh.Heads {
		for t := range tiles {
			m.dkdv(&out, dsum, bh, t)
			m.dq(&out, dsum, bh, t)
		}
	}
	return out
}

// forward is flash_fwd's block (qt, bh): 64 query rows against the key
// tiles 0..qt.
func (m *tileModel) forward(out *flashOut, bh, qt int) {
	sh, D := m.in.sh, m.in.sh.D
	for r := qt * flashRows; r < (qt+1)*flashRows; r++ {
		mx, l := math.Inf(-1), 0.0
		acc := make([]float64, D)
		for kt := 0; kt <= qt; kt++ {
			if r == qt*flashRows {
				m.tiles[0]++
			}
			s := make([]float64, flashRows)
			tmax := math.Inf(-1)
			for j := range s {
				col := kt*flashRows + j
				if col <= r && col < sh.Seq {
					s[j] = m.in.scale * dot64(m.at(m.in.q, bh, r), m.at(m.in.k, bh, col))
					if r < sh.Seq {
						m.visits[0]++
					}
				} else {
					s[j] = math.Inf(-1)
				}
				tmax = max(tmax, s[j])
			}
			mn := max(mx, tmax)
			base := mn
			if math.IsInf(mn, -1) {
				base = 0
			}
			alpha := math.Exp(mx - base)
			mx = mn
			l *= alpha
			for c := range acc {
				acc[c] *= alpha
			}
			for j := range s {
				p := math.Exp(s[j] - base)
				l += p
				for c, x := range m.at(m.in.v, bh, kt*flashRows+j) {
					acc[c] += m.rnd(p) * x
				}
			}
		}
		if r >= sh.Seq {
			continue
		}
		out.lse[bh*sh.Seq+r] = mx + math.Log(l)
		for c := range acc {
			out.o[(bh*sh.Seq+r)*D+c] = acc[c] / l
		}
	}
}

// dkdv is flash_bwd_dkdv's block (kt, bh): 64 key rows against the query
// tiles of BQ rows from the diagonal to the last.
func (m *tileModel) dkdv(out *flashOut, dsum []float64, bh, kt int) {
	sh, D := m.in.sh, m.in.sh.D
	bq := flashDKDVQuery(D)
	last := (sh.Seq - 1) / bq
	for r := kt * flashRows; r < (kt+1)*flashRows; r++ {
		gk, gv := make([]float64, D), make([]float64, D)
		for it := kt * flashRows / bq; it <= last; it++ {
			if r == kt*flashRows {
				m.tiles[1]++
			}
			for j := range bq {
				col := it*bq + j
				if !(col >= r && col < sh.Seq) {
					continue
				}
				if r < sh.Seq {
					m.visits[1]++
				}
				row := bh*sh.Seq + col
				p := math.Exp(m.in.scale*dot64(m.at(m.in.k, bh, r), m.at(m.in.q, bh, col)) - out.lse[row])
				ds := p * (dot64(m.at(m.in.v, bh, r), m.at(m.in.dO, bh, col)) - dsum[row])
				for c := range D {
					gv[c] += m.rnd(p) * m.at(m.in.dO, bh, col)[c]
					gk[c] += m.rnd(ds) * m.at(m.in.q, bh, col)[c]
				}
			}
		}
		if r >= sh.Seq {
			continue
		}
		for c := range D {
			out.dk[(bh*sh.Seq+r)*D+c] = m.in.scale * gk[c]
			out.dv[(bh*sh.Seq+r)*D+c] = gv[c]
		}
	}
}

// dq is flash_bwd_dq's block (qt, bh): 64 query rows against the key
// tiles 0..qt.
func (m *tileModel) dq(out *flashOut, dsum []float64, bh, qt int) {
	sh, D := m.in.sh, m.in.sh.D
	for r := qt * flashRows; r < (qt+1)*flashRows; r++ {
		if r >= sh.Seq { // the kernel computes these rows from zeros and drops them
			continue
		}
		acc := make([]float64, D)
		row := bh*sh.Seq + r
		for kt := 0; kt <= qt; kt++ {
			if r == qt*flashRows {
				m.tiles[2]++
			}
			for j := range flashRows {
				col := kt*flashRows + j
				if !(col <= r && col < sh.Seq) {
					continue
				}
				m.visits[2]++
				p := math.Exp(m.in.scale*dot64(m.at(m.in.q, bh, r), m.at(m.in.k, bh, col)) - out.lse[row])
				ds := p * (dot64(m.at(m.in.dO, bh, r), m.at(m.in.v, bh, col)) - dsum[row])
				for c, x := range m.at(m.in.k, bh, col) {
					acc[c] += m.rnd(ds) * x
				}
			}
		}
		for c := range D {
			out.dq[row*D+c] = m.in.scale * acc[c]
		}
	}
}

// flashCases are the shapes of the flash tests: seq below, at, and beyond
// one tile, ragged last tiles, D 64 and 128 (and, for D = 128, query tiles
// of 32 in the dK/dV kernel that start inside a key tile).
var flashCases = []FlashShape{
	{1, 1, 1, 64}, {2, 3, 37, 64}, {1, 2, 64, 64}, {2, 2, 130, 64}, {1, 1, 257, 64},
	{1, 1, 1, 128}, {1, 2, 64, 128}, {2, 2, 100, 128}, {1, 1, 193, 128},
}

// relErr returns max |got - want| over max |want| of one output, or over
// 0.1 where every |want| is smaller (at seq 1, dq and dk are 0: the one
// probability is 1 and ds = p·(dp - dsum) vanishes; the kernels leave
// float32 residues there).
func relErr(got, want []float64) float64 {
	num, den := 0.0, 0.1
	for i := range want {
		num = max(num, math.Abs(got[i]-want[i]))
		den = max(den, math.Abs(want[i]))
	}
	return num / den
}

func (o flashOut) named() map[string][]float64 {
	return map[string][]float64{"o": o.o, "lse": o.lse, "dq": o.dq, "dk": o.dk, "dv": o.dv}
}

// TestFlashTileModel runs the kernels' loops on the CPU in float64
// (tileModel) and demands the plain reference's results to 1e-12 of each
// output's largest value: the tiles, masks, start tiles and ragged edges
// of flash.cu cover every (query, key) pair of the causal triangle once
// per kernel and nothing else. It also counts the pairs (seq·(seq+1)/2 per
// head in each kernel) and the tiles (the triangle of 64-row tiles only;
// for the dK/dV kernel, the query tiles from each key tile's diagonal).
func TestFlashTileModel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, sh := range flashCases {
		t.Run(fmt.Sprintf("%+v", sh), func(t *testing.T) {
			in := newFlashIn(r, sh, 1.5)
			want := refFlash(in)
			m := &tileModel{in: in}
			got := m.run().named()
			for name, w := range want.named() {
				if e := relErr(got[name], w); !(e <= 1e-12) {
					t.Errorf("%s: tile model differs from the reference by %.3g of its largest value", name, e)
				}
			}
			nt, heads := (sh.Seq+flashRows-1)/flashRows, sh.Batch*sh.Heads
			pairs := heads * sh.Seq * (sh.Seq + 1) / 2
			bq := flashDKDVQuery(sh.D)
			dkdvTiles := 0
			for kt := range nt {
				dkdvTiles += (sh.Seq-1)/bq - kt*flashRows/bq + 1
			}
			wantTiles := [3]int{heads * nt * (nt + 1) / 2, heads * dkdvTiles, heads * nt * (nt + 1) / 2}
			if m.visits != [3]int{pairs, pairs, pairs} || m.tiles != wantTiles {
				t.Errorf("visits %v, tiles %v; want %d pairs per kernel, tiles %v", m.visits, m.tiles, pairs, wantTiles)
			}
		})
	}
}

// flashTol is the error allowed of each output of the kernels against
// refFlash, as a fraction of the output's largest value: the bfloat16
// rounding of the probabilities, of the score gradient and of the kept
// output (relative 2^-9 each) costs up to about 4e-3 (TestFlashRounding
// measures it with the tile model, which rounds where the kernels do);
// the kernels' float32 sums and exp2f add about 1e-6. lse has no bfloat16
// step.
var flashTol = map[string]float64{"o": 1e-2, "lse": 1e-5, "dq": 2e-2, "dk": 2e-2, "dv": 1e-2}

// TestFlashRounding checks that the bfloat16 roundings of the kernels,
// modelled by the tile model, stay within half of flashTol on the test
// shapes, so that the GPU tests' tolerances leave room for float32
// summation and no more.
func TestFlashRounding(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range flashCases {
		in := newFlashIn(r, sh, 1.5)
		want := refFlash(in)
		got := (&tileModel{in: in, round: true}).run().named()
		for name, w := range want.named() {
			e := relErr(got[name], w)
			t.Logf("%+v %s: %.3g", sh, name, e)
			if !(e <= flashTol[name]/2) {
				t.Errorf("%+v %s: bfloat16 rounding costs %.3g of the largest value, tolerance %.3g", sh, name, e, flashTol[name])
			}
		}
	}
}

// flashEntryRE matches the entry points of the pipe and wide kernels in
// flash.cu and flashalt.cu: FLASH_FWD(name, flash_fwd_w<D, MT>), FLASH_DQ(name,
// flash_dq_w<D, N, MT>), FLASH_DKDV(name, flash_dkdv_w<D, BQ, MT>), and
// FLASH_DKDV_DS(name, flash_dkdv_w<D, BQ, MT, true>) of flashDS.
var flashEntryRE = regexp.MustCompile(`(?m)^FLASH_(?:FWD|DQ|DKDV)(?:_DS)?\((\w+), flash_(fwd|dq|dkdv)_w<(\d+), (\d+)(?:, (\d+))?(?:, true)?>\)`)

// TestFlashTilesMatchSource checks that flash.go's description of the pipe
// and wide kernels (flashTileOf, flashWideTiles: rows per block, tile rows,
// hence the shared memory the launcher gives) is what flash.cu and
// flashalt.cu instantiate under each name, and that every such kernel is
// described (CPU only: reads the sources).
func TestFlashTilesMatchSource(t *testing.T) {
	var src []byte
	for _, f := range []string{"flash.cu", "flashalt.cu"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	passes := map[string]flashPass{"fwd": flashFwd, "dkdv": flashDKDV, "dq": flashDQ}
	found := map[string]bool{}
	for _, m := range flashEntryRE.FindAllStringSubmatch(string(src), -1) {
		name, p := m[1], passes[m[2]]
		d, _ := strconv.Atoi(m[3])
		mt, n := 0, flashRows
		if m[5] == "" { // flash_fwd_w<D, MT>: key tiles of 64
			mt, _ = strconv.Atoi(m[4])
		} else {
			n, _ = strconv.Atoi(m[4])
			mt, _ = strconv.Atoi(m[5])
		}
		found[name] = true
		ok := false
		for _, v := range []flashVariant{flashPipe, flashWide, flashDS} {
			tile, has := flashTileOf(p, d, v)
			if !has || tile.name != name {
				continue
			}
			ok = true
			wv := v
			if v == flashDS { // flashPipe's dK/dV kernel
				wv = flashPipe
			}
			if wm, wn := flashWideTiles(p, d, wv); wm != mt || wn != n || tile.rows != 64*mt {
				t.Errorf("%s: the source has %d m-tiles and tiles of %d, flash.go %d and %d (rows %d)", name, mt, n, wm, wn, tile.rows)
			}
		}
		if !ok {
			t.Errorf("%s: in the source, not a pipe, wide or ds kernel of flash.go", name)
		}
	}
	for _, v := range []flashVariant{flashPipe, flashWide, flashDS} {
		for _, p := range []flashPass{flashFwd, flashDKDV, flashDQ} {
			for _, d := range []int{64, 128} {
				if tile, has := flashTileOf(p, d, v); has && !(v == flashDS && p == flashDQ) && !found[tile.name] {
					t.Errorf("%s: named by flash.go, instantiated in neither flash.cu nor flashalt.cu", tile.name)
				}
			}
		}
	}
}

// TestFlashBenchNames checks the sub-benchmark names of
// BenchmarkFlashKernels (CPU only: the benchmark itself needs a GPU), one
// per pass and variant that has it.
func TestFlashBenchNames(t *testing.T) {
	for _, d := range []int{64, 128} {
		seen := map[string]bool{}
		for _, v := range flashVariants {
			for _, p := range []flashPass{flashFwd, flashDKDV, flashDQ, flashBwd} {
				if !flashHas(p, d, v) {
					continue
				}
				name := flashPassName(p) + "/" + v.String()
				if seen[name] || strings.Contains(name, "%!") {
					t.Errorf("D %d: sub-benchmark %q twice or malformed", d, name)
				}
				seen[name] = true
			}
		}
		if !seen["bwd/ds"] || !seen["fwd/wide"] || seen["fwd/ds"] {
			t.Errorf("D %d: sub-benchmarks %v", d, seen)
		}
	}
}
