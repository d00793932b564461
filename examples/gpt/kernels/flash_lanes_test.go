package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
)

// A lane-level model of flash.cu: the kernels' code restated in Go for the
// 32 lanes of each warp, with the swizzled shared tiles, the register
// fragments loaded exactly as the kernels load them, and mma.m16n8k16
// computed from the fragment layouts of the PTX ISA (emuMMA assembles the
// 16x16 A and 16x8 B matrices from the lanes' registers by those tables,
// multiplies, and hands D back the same way). Where tileModel checks the
// tile loops, this checks the fragment bookkeeping: which lane loads which
// element into which register half, the C-to-A reuse of the
// probabilities, the quad reductions and the stores.

// frag is one 16x8 float32 C fragment of a warp: 4 registers per lane.
type frag [32][4]float32

func emuSidx(d, r, col int) int { return r*d + (((col >> 3) ^ (r & 7)) << 3) + (col & 7) }

func emuPair(s []uint16, d, r, col int) uint32 {
	i := emuSidx(d, r, col)
	return uint32(s[i]) | uint32(s[i+1])<<16
}

func emuTPair(s []uint16, d, r, col int) uint32 {
	return uint32(s[emuSidx(d, r, col)]) | uint32(s[emuSidx(d, r+1, col)])<<16
}

func emuPack2(lo, hi float32) uint32 {
	return uint32(bf16.FromFloat32(lo)) | uint32(bf16.FromFloat32(hi))<<16
}

func lo16(x uint32) float64 { return float64(bf16.ToFloat32(uint16(x))) }
func hi16(x uint32) float64 { return float64(bf16.ToFloat32(uint16(x >> 16))) }

// emuMMA is mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32, c += a·b, with
// the PTX ISA's fragment tables (g = lane/4, t = lane%4): a0 (g, 2t..2t+1),
// a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..); b0 (k = 2t..2t+1, n =
// g), b1 (k = 2t+8..2t+9, n = g); c0, c1 (g, 2t..2t+1), c2, c3 (g+8, ..).
func emuMMA(c *frag, a *[32][4]uint32, b0, b1 *[32]uint32) {
	var A [16][16]float64
	var B [16][8]float64
	for lane := range 32 {
		g, t := lane>>2, lane&3
		for i, rc := range [4][2]int{{g, 2 * t}, {g + 8, 2 * t}, {g, 2*t + 8}, {g + 8, 2*t + 8}} {
			A[rc[0]][rc[1]], A[rc[0]][rc[1]+1] = lo16(a[lane][i]), hi16(a[lane][i])
		}
		B[2*t][g], B[2*t+1][g] = lo16(b0[lane]), hi16(b0[lane])
		B[2*t+8][g], B[2*t+9][g] = lo16(b1[lane]), hi16(b1[lane])
	}
	for lane := range 32 {
		g, t := lane>>2, lane&3
		for i, rc := range [4][2]int{{g, 2 * t}, {g, 2*t + 1}, {g + 8, 2 * t}, {g + 8, 2*t + 1}} {
			s := float64(c[lane][i])
			for k := range 16 {
				s += A[rc[0]][k] * B[k][rc[1]]
			}
			c[lane][i] = float32(s)
		}
	}
}

// emuLdm4 is ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 by the PTX
// ISA: lanes 8i..8i+7 give the element indices of the 8 rows of matrix i;
// lane l receives in register i row l/4, columns 2(l%4) and 2(l%4)+1 of
// matrix i, or with trans rows 2(l%4) and 2(l%4)+1 of column l/4.
func emuLdm4(s []uint16, addrs *[32]int, trans bool) (r [32][4]uint32) {
	for lane := range 32 {
		for i := range 4 {
			if trans {
				col := lane / 4
				r[lane][i] = uint32(s[addrs[8*i+2*(lane%4)]+col]) | uint32(s[addrs[8*i+2*(lane%4)+1]+col])<<16
			} else {
				a := addrs[8*i+lane/4] + 2*(lane%4)
				r[lane][i] = uint32(s[a]) | uint32(s[a+1])<<16
			}
		}
	}
	return r
}

// emuLoadTile is load_tile: rows row0.. of a packed [seq, d] matrix into a
// swizzled tile of rows rows, zeros beyond seq.
func emuLoadTile(s, g []uint16, d, rows, row0, seq int) {
	chunks := d / 8
	for i := range rows * chunks {
		r, c := i/chunks, i%chunks
		for e := range 8 {
			v := uint16(0)
			if row0+r < seq {
				v = g[(row0+r)*d+8*c+e]
			}
			s[r*d+((c^(r&7))<<3)+e] = v
		}
	}
}

// emuRowsProduct is rows_product: acc[n] = rows a0.. of sa times rows of
// sb, the fragments loaded by ldmatrix (ldm) or by 32-bit loads.
func emuRowsProduct(acc []frag, sa []uint16, a0 int, sb []uint16, d int, ldm bool) {
	for n := range acc {
		acc[n] = frag{}
	}
	for k := 0; k < d; k += 16 {
		var a [32][4]uint32
		var addrs [32]int
		for lane := range 32 {
			g, c, m := lane>>2, lane&3, lane>>3
			a[lane] = [4]uint32{emuPair(sa, d, a0+g, k+2*c), emuPair(sa, d, a0+g+8, k+2*c),
				emuPair(sa, d, a0+g, k+2*c+8), emuPair(sa, d, a0+g+8, k+2*c+8)}
			addrs[lane] = emuSidx(d, a0+8*(m&1)+(lane&7), k+8*(m>>1))
		}
		if ldm {
			a = emuLdm4(sa, &addrs, false)
		}
		for n := 0; n < len(acc); n += 2 {
			var b [32][4]uint32
			for lane := range 32 {
				g, c, m := lane>>2, lane&3, lane>>3
				b[lane] = [4]uint32{emuPair(sb, d, 8*n+g, k+2*c), emuPair(sb, d, 8*n+g, k+2*c+8),
					emuPair(sb, d, 8*n+8+g, k+2*c), emuPair(sb, d, 8*n+8+g, k+2*c+8)}
				addrs[lane] = emuSidx(d, 8*n+8*(m>>1)+(lane&7), k+8*(m&1))
			}
			if ldm {
				b = emuLdm4(sb, &addrs, false)
			}
			emuMMA2(acc[n:n+2], &a, &b)
		}
	}
}

// emuMMA2 is the two mma of a pair of n-tiles: b's registers 0, 1 for the
// first, 2, 3 for the second.
func emuMMA2(acc []frag, a, b *[32][4]uint32) {
	for j := range 2 {
		var b0, b1 [32]uint32
		for lane := range 32 {
			b0[lane], b1[lane] = b[lane][2*j], b[lane][2*j+1]
		}
		emuMMA(&acc[j], a, &b0, &b1)
	}
}

// emuAccumulatePV is accumulate_pv: out += P·V, P in C fragments, the B
// fragments loaded by ldmatrix.trans (ldm) or by 16-bit loads.
func emuAccumulatePV(out, p []frag, sv []uint16, d int, ldm bool) {
	for k := range len(p) / 2 {
		var a [32][4]uint32
		for lane := range 32 {
			x, y := p[2*k][lane], p[2*k+1][lane]
			a[lane] = [4]uint32{emuPack2(x[0], x[1]), emuPack2(x[2], x[3]), emuPack2(y[0], y[1]), emuPack2(y[2], y[3])}
		}
		for n := 0; n < len(out); n += 2 {
			var b [32][4]uint32
			var addrs [32]int
			for lane := range 32 {
				g, c, m := lane>>2, lane&3, lane>>3
				b[lane] = [4]uint32{emuTPair(sv, d, 16*k+2*c, 8*n+g), emuTPair(sv, d, 16*k+2*c+8, 8*n+g),
					emuTPair(sv, d, 16*k+2*c, 8*n+8+g), emuTPair(sv, d, 16*k+2*c+8, 8*n+8+g)}
				addrs[lane] = emuSidx(d, 16*k+8*(m&1)+(lane&7), 8*n+8*(m>>1))
			}
			if ldm {
				b = emuLdm4(sv, &addrs, true)
			}
			emuMMA2(out[n:n+2], &a, &b)
		}
	}
}

// emuQuad is the two-step butterfly over the 4 lanes of a row.
func emuQuad(v [32]float32, op func(a, b float32) float32) [32]float32 {
	for _, m := range []int{1, 2} {
		var w [32]float32
		for l := range 32 {
			w[l] = op(v[l], v[l^m])
		}
		v = w
	}
	return v
}

func exp2f(x float32) float32 { return float32(math.Exp2(float64(x))) }

// emuStoreRows is store_rows into a packed float32 [seq, d] head out.
func emuStoreRows(out []float32, d, r0, seq int, acc []frag, mul [32][2]float32) {
	for lane := range 32 {
		g, c := lane>>2, lane&3
		for h := range 2 {
			r := r0 + g + 8*h
			if r >= seq {
				continue
			}
			for n := range acc {
				out[r*d+8*n+2*c] = acc[n][lane][2*h] * mul[lane][h]
				out[r*d+8*n+2*c+1] = acc[n][lane][2*h+1] * mul[lane][h]
			}
		}
	}
}

// emuHead is one head's inputs (bfloat16 bits, packed [seq, d]) and
// outputs (float32, packed).
type emuHead struct {
	d, seq           int
	ldm              bool
	scale            float32
	q, k, v, dO, o16 []uint16
	o, lse, dsum     []float32
	dq, dk, dv       []float32
	ds               []uint16 // the dS tiles of flashDS
}

// forward is flash_fwd's block qt.
func (h *emuHead) forward(qt int) {
	d, seq := h.d, h.seq
	sq, sk, sv := make([]uint16, 64*d), make([]uint16, 64*d), make([]uint16, 64*d)
	emuLoadTile(sq, h.q, d, 64, qt*64, seq)
	cl := h.scale * 1.4426950408889634
	var m, l [4][32][2]float32
	acc := make([][]frag, 4)
	for w := range 4 {
		acc[w] = make([]frag, d/8)
		for lane := range 32 {
			m[w][lane] = [2]float32{float32(math.Inf(-1)), float32(math.Inf(-1))}
		}
	}
	s := make([]frag, 8)
	for kt := 0; kt <= qt; kt++ {
		emuLoadTile(sk, h.k, d, 64, kt*64, seq)
		emuLoadTile(sv, h.v, d, 64, kt*64, seq)
		for w := range 4 {
			r0 := qt*64 + 16*w
			emuRowsProduct(s, sq, 16*w, sk, d, h.ldm)
			var mx [2][32]float32
			for lane := range 32 {
				g, c := lane>>2, lane&3
				mx[0][lane], mx[1][lane] = float32(math.Inf(-1)), float32(math.Inf(-1))
				for n := range 8 {
					for e := range 4 {
						r, col := r0+g+8*(e>>1), kt*64+8*n+2*c+(e&1)
						if col <= r && col < seq {
							s[n][lane][e] *= cl
						} else {
							s[n][lane][e] = float32(math.Inf(-1))
						}
						mx[e>>1][lane] = max(mx[e>>1][lane], s[n][lane][e])
					}
				}
			}
			emuSoftmaxStep(s, acc[w], &m[w], &l[w], mx)
			emuAccumulatePV(acc[w], s, sv, d, h.ldm)
		}
	}
	for w := range 4 {
		h.finishRows(qt*64+16*w, acc[w], &m[w], &l[w])
	}
}

// prep is flash_bwd_prep for every row: dO rounded, dsum by 32 lanes and
// a butterfly.
func (h *emuHead) prep(dOf []float32) {
	for r := range h.seq {
		var part [32]float32
		for lane := range 32 {
			for col := lane; col < h.d; col += 32 {
				b := bf16.FromFloat32(dOf[r*h.d+col])
				h.dO[r*h.d+col] = b
				part[lane] += bf16.ToFloat32(b) * bf16.ToFloat32(h.o16[r*h.d+col])
			}
		}
		for w := 16; w > 0; w >>= 1 {
			var next [32]float32
			for l := range 32 {
				next[l] = part[l] + part[l^w]
			}
			part = next
		}
		h.dsum[r] = part[0]
	}
}

// dkdv is flash_bwd_dkdv's block kt, query tiles of bq rows.
func (h *emuHead) dkdv(kt, bq int) {
	d, seq := h.d, h.seq
	sk, sv, sq, sd := make([]uint16, 64*d), make([]uint16, 64*d), make([]uint16, bq*d), make([]uint16, bq*d)
	emuLoadTile(sk, h.k, d, 64, kt*64, seq)
	emuLoadTile(sv, h.v, d, 64, kt*64, seq)
	cl := h.scale * 1.4426950408889634
	gk, gv := make([][]frag, 4), make([][]frag, 4)
	for w := range 4 {
		gk[w], gv[w] = make([]frag, d/8), make([]frag, d/8)
	}
	p, dp := make([]frag, bq/8), make([]frag, bq/8)
	slse, sdot := make([]float32, bq), make([]float32, bq)
	for it := kt * 64 / bq; it <= (seq-1)/bq; it++ {
		emuLoadTile(sq, h.q, d, bq, it*bq, seq)
		emuLoadTile(sd, h.dO, d, bq, it*bq, seq)
		for i := range bq {
			slse[i], sdot[i] = 0, 0
			if it*bq+i < seq {
				slse[i], sdot[i] = h.lse[it*bq+i]*1.4426950408889634, h.dsum[it*bq+i]
			}
		}
		for w := range 4 {
			r0 := kt*64 + 16*w
			emuRowsProduct(p, sk, 16*w, sq, d, h.ldm)
			emuRowsProduct(dp, sv, 16*w, sd, d, h.ldm)
			for lane := range 32 {
				g, c := lane>>2, lane&3
				for n := range bq / 8 {
					for e := range 4 {
						r, jl := r0+g+8*(e>>1), 8*n+2*c+(e&1)
						col := it*bq + jl
						pe := float32(0)
						if col >= r && col < seq {
							pe = exp2f(p[n][lane][e]*cl - slse[jl])
						}
						p[n][lane][e] = pe
						dp[n][lane][e] = pe * (dp[n][lane][e] - sdot[jl])
					}
				}
			}
			emuAccumulatePV(gv[w], p, sd, d, h.ldm)
			emuAccumulatePV(gk[w], dp, sq, d, h.ldm)
		}
	}
	var one, sc [32][2]float32
	for lane := range 32 {
		one[lane], sc[lane] = [2]float32{1, 1}, [2]float32{h.scale, h.scale}
	}
	for w := range 4 {
		emuStoreRows(h.dk, d, kt*64+16*w, seq, gk[w], sc)
		emuStoreRows(h.dv, d, kt*64+16*w, seq, gv[w], one)
	}
}

// dqBlock is flash_bwd_dq's block qt.
func (h *emuHead) dqBlock(qt int) {
	d, seq := h.d, h.seq
	sq, sd, sk, sv := make([]uint16, 64*d), make([]uint16, 64*d), make([]uint16, 64*d), make([]uint16, 64*d)
	emuLoadTile(sq, h.q, d, 64, qt*64, seq)
	emuLoadTile(sd, h.dO, d, 64, qt*64, seq)
	cl := h.scale * 1.4426950408889634
	acc := make([][]frag, 4)
	for w := range 4 {
		acc[w] = make([]frag, d/8)
	}
	p, dp := make([]frag, 8), make([]frag, 8)
	for kt := 0; kt <= qt; kt++ {
		emuLoadTile(sk, h.k, d, 64, kt*64, seq)
		emuLoadTile(sv, h.v, d, 64, kt*64, seq)
		for w := range 4 {
			r0 := qt*64 + 16*w
			emuRowsProduct(p, sq, 16*w, sk, d, h.ldm)
			emuRowsProduct(dp, sd, 16*w, sv, d, h.ldm)
			for lane := range 32 {
				g, c := lane>>2, lane&3
				for n := range 8 {
					for e := range 4 {
						r, col := r0+g+8*(e>>1), kt*64+8*n+2*c+(e&1)
						rl, rd := float32(0), float32(0)
						if r < seq {
							rl, rd = h.lse[r]*1.4426950408889634, h.dsum[r]
						}
						pe := float32(0)
						if col <= r && col < seq {
							pe = exp2f(p[n][lane][e]*cl - rl)
						}
						p[n][lane][e] = pe * (dp[n][lane][e] - rd)
					}
				}
			}
			emuAccumulatePV(acc[w], p, sk, d, h.ldm)
		}
	}
	var sc [32][2]float32
	for lane := range 32 {
		sc[lane] = [2]float32{h.scale, h.scale}
	}
	for w := range 4 {
		emuStoreRows(h.dq, d, qt*64+16*w, seq, acc[w], sc)
	}
}

// emuFlash runs the lane-level model of the four kernels of variant v on
// every head of in and returns the outputs like refFlash's; for
// flashLdmatrix, ldm false loads the fragments by plain loads of the
// elements that the PTX fragment tables name instead of by ldmatrix (a
// model-only cross-check of the ldmatrix addresses).
func emuFlash(in *flashIn, v flashVariant, ldm bool) flashOut {
	sh, d := in.sh, in.sh.D
	out := flashOut{o: make([]float64, sh.Rows()*d), lse: make([]float64, sh.Rows()), dq: make([]float64, sh.Rows()*d),
		dk: make([]float64, sh.Rows()*d), dv: make([]float64, sh.Rows()*d)}
	bits := func(x []float64) []uint16 {
		u := make([]uint16, len(x))
		for i, v := range x {
			u[i] = bf16.FromFloat32(float32(v))
		}
		return u
	}
	for bh := range sh.Batch * sh.Heads {
		lo, hi := bh*sh.Seq*d, (bh+1)*sh.Seq*d
		n := sh.Seq * d
		h := &emuHead{d: d, seq: sh.Seq, ldm: ldm, scale: float32(in.scale), q: bits(in.q[lo:hi]), k: bits(in.k[lo:hi]), v: bits(in.v[lo:hi]),
			dO: make([]uint16, n), o16: make([]uint16, n), o: make([]float32, n), lse: make([]float32, sh.Seq),
			dsum: make([]float32, sh.Seq), dq: make([]float32, n), dk: make([]float32, n), dv: make([]float32, n)}
		h.forwardAll(v)
		for i, x := range h.o {
			h.o16[i] = bf16.FromFloat32(x)
		}
		dOf := make([]float32, n)
		for i := range dOf {
			dOf[i] = float32(in.dO[lo+i])
		}
		h.prep(dOf)
		h.backwardAll(v)
		for i := range n {
			out.o[lo+i], out.dq[lo+i], out.dk[lo+i], out.dv[lo+i] = float64(h.o[i]), float64(h.dq[i]), float64(h.dk[i]), float64(h.dv[i])
		}
		for i := range sh.Seq {
			out.lse[bh*sh.Seq+i] = float64(h.lse[i])
		}
	}
	return out
}

// forwardAll runs the forward kernel of variant v on every tile of h.
func (h *emuHead) forwardAll(v flashVariant) {
	if v != flashPipe && v != flashWide {
		for qt := range (h.seq + 63) / 64 {
			h.forward(qt)
		}
		return
	}
	mt, _ := flashWideTiles(flashFwd, h.d, v)
	for qt := range (h.seq + 64*mt - 1) / (64 * mt) {
		h.forwardW(qt, mt)
	}
}

// backwardAll runs the dK/dV and dQ kernels of variant v on every tile of
// h (after prep).
func (h *emuHead) backwardAll(v flashVariant) {
	if v == flashLdmatrix {
		for t := range (h.seq + 63) / 64 {
			h.dkdv(t, flashDKDVQuery(h.d))
			h.dqBlock(t)
		}
		return
	}
	if v == flashDS {
		t := (h.seq + 63) / 64
		h.ds = make([]uint16, t*(t+1)/2*4096)
		for i := range h.ds {
			h.ds[i] = 0x7fc1 // NaN, as the GPU test fills it
		}
		_, bq := flashWideTiles(flashDKDV, h.d, flashPipe)
		for kt := range t {
			h.dkdvW(kt, 1, bq, true)
		}
		for a := range t {
			h.dqDS(a)
		}
		return
	}
	mt, bq := flashWideTiles(flashDKDV, h.d, v)
	for kt := range (h.seq + 64*mt - 1) / (64 * mt) {
		h.dkdvW(kt, mt, bq, false)
	}
	mt, n := flashWideTiles(flashDQ, h.d, v)
	for qt := range (h.seq + 64*mt - 1) / (64 * mt) {
		h.dqW(qt, mt, n)
	}
}

// TestFlashLanes runs the lane-level model of the kernels of every
// variant at flashCases against refFlash with the GPU test's tolerances
// (flashTol), and demands of every variant the bits of flashLdmatrix, and
// of flashLdmatrix the bits of its model with plain element loads instead
// of ldmatrix: a wrong fragment index, ldmatrix address, register order,
// swizzle, reduction, m-tile offset, tile skip or unmasked tile gives
// errors of the order of the outputs themselves, or other bits.
func TestFlashLanes(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, sh := range flashCases {
		if testing.Short() && sh.Seq > 130 {
			continue
		}
		t.Run(fmt.Sprintf("%+v", sh), func(t *testing.T) {
			in := newFlashIn(r, sh, 1.5)
			want := refFlash(in).named()
			base := emuFlash(in, flashLdmatrix, true).named()
			runs := map[string]map[string][]float64{"ldmatrix with plain loads": emuFlash(in, flashLdmatrix, false).named()}
			for _, v := range flashVariants {
				runs[v.String()] = base
				if v != flashLdmatrix {
					runs[v.String()] = emuFlash(in, v, true).named()
				}
			}
			for v, got := range runs {
				for name, x := range got {
					e := relErr(x, want[name])
					t.Logf("%v %s: %.3g", v, name, e)
					if !(e <= flashTol[name]) {
						t.Errorf("%v %s: lane model differs from the reference by %.3g of its largest value, tolerance %.3g", v, name, e, flashTol[name])
					}
					for i := range x {
						if math.Float64bits(x[i]) != math.Float64bits(base[name][i]) {
							t.Fatalf("%v %s[%d]: %v, with ldmatrix %v", v, name, i, x[i], base[name][i])
						}
					}
				}
			}
		})
	}
}
