package kernels

import (
	"math"

	"github.com/distopt/distopt/bf16"
)

// The lane model of the pipe and wide kernels ("The wide kernels" in
// flash.cu): blocks of R = 64·mt rows, warp w owning rows w0 = R·tile +
// 16·mt·w and mt m-tiles whose A fragments share each B fragment, the
// block's streamed tiles of n rows, a warp skipping the tiles its rows do
// not reach and leaving the mask out of tiles inside the causal triangle.
// The cp.async double buffers are not modelled (a tile is read only after
// it is whole, as the kernels' barriers ensure).

// emuRowsProductW is rows_product_w: acc[mt][n] = rows a0 + 16·mt.. of sa
// times rows of sb, by ldmatrix.
func emuRowsProductW(acc [][]frag, sa []uint16, a0 int, sb []uint16, d int) {
	for mt := range acc {
		for n := range acc[mt] {
			acc[mt][n] = frag{}
		}
	}
	for k := 0; k < d; k += 16 {
		a := make([][32][4]uint32, len(acc))
		for mt := range acc {
			var addrs [32]int
			for lane := range 32 {
				m := lane >> 3
				addrs[lane] = emuSidx(d, a0+16*mt+8*(m&1)+(lane&7), k+8*(m>>1))
			}
			a[mt] = emuLdm4(sa, &addrs, false)
		}
		for n := 0; n < len(acc[0]); n += 2 {
			var addrs [32]int
			for lane := range 32 {
				m := lane >> 3
				addrs[lane] = emuSidx(d, 8*n+8*(m>>1)+(lane&7), k+8*(m&1))
			}
			b := emuLdm4(sb, &addrs, false)
			for mt := range acc {
				emuMMA2(acc[mt][n:n+2], &a[mt], &b)
			}
		}
	}
}

// emuAccumulatePVW is accumulate_pv_w: out[mt] += P[mt]·V, each V fragment
// (ldmatrix.trans) used by every m-tile.
func emuAccumulatePVW(out, p [][]frag, sv []uint16, d int) {
	for k := range len(p[0]) / 2 {
		a := make([][32][4]uint32, len(p))
		for mt := range p {
			for lane := range 32 {
				x, y := p[mt][2*k][lane], p[mt][2*k+1][lane]
				a[mt][lane] = [4]uint32{emuPack2(x[0], x[1]), emuPack2(x[2], x[3]), emuPack2(y[0], y[1]), emuPack2(y[2], y[3])}
			}
		}
		for n := 0; n < len(out[0]); n += 2 {
			var addrs [32]int
			for lane := range 32 {
				m := lane >> 3
				addrs[lane] = emuSidx(d, 16*k+8*(m&1)+(lane&7), 8*n+8*(m>>1))
			}
			b := emuLdm4(sv, &addrs, true)
			for mt := range out {
				emuMMA2(out[mt][n:n+2], &a[mt], &b)
			}
		}
	}
}

// frags returns mt x n zero fragments.
func frags(mt, n int) [][]frag {
	f := make([][]frag, mt)
	for i := range f {
		f[i] = make([]frag, n)
	}
	return f
}

// emuQueryWarp is query_warp: the first row of warp w of block qt (r
// rows, mt m-tiles a warp), the block's last key tile of n and the warp's
// (-1: the warp lies beyond seq).
func emuQueryWarp(qt, w, r, mt, n, seq int) (w0, klast, wlast int) {
	w0 = qt*r + 16*mt*w
	klast = min((qt*r+r-1)/n, (seq-1)/n)
	wlast = -1
	if w0 < seq {
		wlast = min((w0+16*mt-1)/n, (seq-1)/n)
	}
	return w0, klast, wlast
}

// keyTiles runs the key-tile loop of the wide query-tile kernels for block
// qt (mt m-tiles a warp, key tiles of n loaded into sk and sv): visit(w,
// w0, kt) for each warp w (first row w0) that reaches tile kt.
func (h *emuHead) keyTiles(qt, mt, n int, sk, sv []uint16, visit func(w, w0, kt int)) {
	r := 64 * mt
	_, klast, _ := emuQueryWarp(qt, 0, r, mt, n, h.seq)
	for kt := 0; kt <= klast; kt++ {
		emuLoadTile(sk, h.k, h.d, n, kt*n, h.seq)
		emuLoadTile(sv, h.v, h.d, n, kt*n, h.seq)
		for w := range 4 {
			if w0, _, wlast := emuQueryWarp(qt, w, r, mt, n, h.seq); kt <= wlast {
				visit(w, w0, kt)
			}
		}
	}
}

// forwardW is flash_fwd_w's block qt with mt m-tiles a warp.
func (h *emuHead) forwardW(qt, mt int) {
	d, seq, n, r := h.d, h.seq, 64, 64*mt
	sq, sk, sv := make([]uint16, r*d), make([]uint16, n*d), make([]uint16, n*d)
	emuLoadTile(sq, h.q, d, r, qt*r, seq)
	cl := h.scale * 1.4426950408889634
	ninf := float32(math.Inf(-1))
	m, l := make([][][32][2]float32, 4), make([][][32][2]float32, 4)
	acc := make([][][]frag, 4)
	for w := range 4 {
		m[w], l[w], acc[w] = make([][32][2]float32, mt), make([][32][2]float32, mt), frags(mt, d/8)
		for i := range mt {
			for lane := range 32 {
				m[w][i][lane] = [2]float32{ninf, ninf}
			}
		}
	}
	h.keyTiles(qt, mt, n, sk, sv, func(w, w0, kt int) {
		s := frags(mt, n/8)
		emuRowsProductW(s, sq, 16*mt*w, sk, d)
		masked := kt*n+n-1 > w0
		for i := range mt {
			var mx [2][32]float32
			for lane := range 32 {
				g, c := lane>>2, lane&3
				mx[0][lane], mx[1][lane] = ninf, ninf
				for j := range n / 8 {
					for e := range 4 {
						row, col := w0+16*i+g+8*(e>>1), kt*n+8*j+2*c+(e&1)
						if !masked || (col <= row && col < seq) {
							s[i][j][lane][e] *= cl
						} else {
							s[i][j][lane][e] = ninf
						}
						mx[e>>1][lane] = max(mx[e>>1][lane], s[i][j][lane][e])
					}
				}
			}
			emuSoftmaxStep(s[i], acc[w][i], &m[w][i], &l[w][i], mx)
		}
		emuAccumulatePVW(acc[w], s, sv, d)
	})
	for w := range 4 {
		for i := range mt {
			h.finishRows(qt*r+16*mt*w+16*i, acc[w][i], &m[w][i], &l[w][i])
		}
	}
}

// emuSoftmaxStep is the online softmax of one m-tile after its row maxima
// mx of the tile: the new running maxima, the rescaled sum and
// accumulator, and s exponentiated.
func emuSoftmaxStep(s, acc []frag, m, l *[32][2]float32, mx [2][32]float32) {
	var base, alpha [32][2]float32
	for hh := range 2 {
		q := emuQuad(mx[hh], func(a, b float32) float32 { return max(a, b) })
		for lane := range 32 {
			mn := max(m[lane][hh], q[lane])
			base[lane][hh] = mn
			if math.IsInf(float64(mn), -1) {
				base[lane][hh] = 0
			}
			alpha[lane][hh] = exp2f(m[lane][hh] - base[lane][hh])
			m[lane][hh] = mn
			l[lane][hh] *= alpha[lane][hh]
		}
	}
	for lane := range 32 {
		for j := range s {
			for e := range 4 {
				s[j][lane][e] = exp2f(s[j][lane][e] - base[lane][e>>1])
				l[lane][e>>1] += s[j][lane][e]
			}
		}
		for j := range acc {
			for e := range 4 {
				acc[j][lane][e] *= alpha[lane][e>>1]
			}
		}
	}
}

// finishRows is the forward's end for the m-tile of rows r0..: the quad
// sums of l, lse and o = acc/l for the rows below seq.
func (h *emuHead) finishRows(r0 int, acc []frag, m, l *[32][2]float32) {
	var inv [32][2]float32
	for hh := range 2 {
		var v [32]float32
		for lane := range 32 {
			v[lane] = l[lane][hh]
		}
		v = emuQuad(v, func(a, b float32) float32 { return a + b })
		for lane := range 32 {
			inv[lane][hh] = 1 / v[lane]
			if r := r0 + lane>>2 + 8*hh; lane&3 == 0 && r < h.seq {
				h.lse[r] = (m[lane][hh] + float32(math.Log2(float64(v[lane])))) * 0.6931471805599453
			}
		}
	}
	emuStoreRows(h.o, h.d, r0, h.seq, acc, inv)
}

// dqW is flash_dq_w's block qt: mt m-tiles a warp, key tiles of n.
func (h *emuHead) dqW(qt, mt, n int) {
	d, seq, r := h.d, h.seq, 64*mt
	sq, sd, sk, sv := make([]uint16, r*d), make([]uint16, r*d), make([]uint16, n*d), make([]uint16, n*d)
	emuLoadTile(sq, h.q, d, r, qt*r, seq)
	emuLoadTile(sd, h.dO, d, r, qt*r, seq)
	cl := h.scale * 1.4426950408889634
	acc := make([][][]frag, 4)
	for w := range 4 {
		acc[w] = frags(mt, d/8)
	}
	h.keyTiles(qt, mt, n, sk, sv, func(w, w0, kt int) {
		p, dp := frags(mt, n/8), frags(mt, n/8)
		emuRowsProductW(p, sq, 16*mt*w, sk, d)
		emuRowsProductW(dp, sd, 16*mt*w, sv, d)
		masked := kt*n+n-1 > w0
		for i := range mt {
			for lane := range 32 {
				g, c := lane>>2, lane&3
				for j := range n / 8 {
					for e := range 4 {
						row, col := w0+16*i+g+8*(e>>1), kt*n+8*j+2*c+(e&1)
						rl, rd := float32(0), float32(0)
						if row < seq {
							rl, rd = h.lse[row]*1.4426950408889634, h.dsum[row]
						}
						pe := float32(0)
						if !masked || (col <= row && col < seq) {
							pe = exp2f(p[i][j][lane][e]*cl - rl)
						}
						p[i][j][lane][e] = pe * (dp[i][j][lane][e] - rd)
					}
				}
			}
		}
		emuAccumulatePVW(acc[w], p, sk, d)
	})
	h.storeW(h.dq, qt, mt, acc, h.scale)
}

// storeW stores the accumulators acc[warp][m-tile] of block t (64·mt rows)
// times mul into out.
func (h *emuHead) storeW(out []float32, t, mt int, acc [][][]frag, mul float32) {
	var mm [32][2]float32
	for lane := range 32 {
		mm[lane] = [2]float32{mul, mul}
	}
	for w := range 4 {
		for i := range mt {
			emuStoreRows(out, h.d, 64*mt*t+16*mt*w+16*i, h.seq, acc[w][i], mm)
		}
	}
}

// dkdvW is flash_dkdv_w's block kt: mt m-tiles of keys a warp, query
// tiles of bq; with store (flashDS) no tile skipped and dSᵀ stored into
// h.ds.
func (h *emuHead) dkdvW(kt, mt, bq int, store bool) {
	d, seq, r := h.d, h.seq, 64*mt
	sk, sv, sq, sd := make([]uint16, r*d), make([]uint16, r*d), make([]uint16, bq*d), make([]uint16, bq*d)
	emuLoadTile(sk, h.k, d, r, kt*r, seq)
	emuLoadTile(sv, h.v, d, r, kt*r, seq)
	cl := h.scale * 1.4426950408889634
	gk, gv := make([][][]frag, 4), make([][][]frag, 4)
	for w := range 4 {
		gk[w], gv[w] = frags(mt, d/8), frags(mt, d/8)
	}
	slse, sdot := make([]float32, bq), make([]float32, bq)
	last := (seq - 1) / bq
	for it := kt * r / bq; it <= last; it++ {
		emuLoadTile(sq, h.q, d, bq, it*bq, seq)
		emuLoadTile(sd, h.dO, d, bq, it*bq, seq)
		for i := range bq {
			slse[i], sdot[i] = 0, 0
			if it*bq+i < seq {
				slse[i], sdot[i] = h.lse[it*bq+i], h.dsum[it*bq+i]
			}
		}
		for w := range 4 {
			w0 := kt*r + 16*mt*w
			wfirst := last + 1
			if store {
				wfirst = kt * r / bq
			} else if w0 < seq {
				wfirst = w0 / bq
			}
			if it < wfirst {
				continue
			}
			p, dp := frags(mt, bq/8), frags(mt, bq/8)
			emuRowsProductW(p, sk, 16*mt*w, sq, d)
			emuRowsProductW(dp, sv, 16*mt*w, sd, d)
			masked := it*bq < w0+16*mt-1 || it*bq+bq > seq
			emuTScores(p, dp, slse, sdot, cl, w0, it*bq, seq, masked)
			if store {
				emuStoreDS(h.ds, dp[0], w0, it*bq)
			}
			emuAccumulatePVW(gv[w], p, sd, d)
			emuAccumulatePVW(gk[w], dp, sq, d)
		}
	}
	h.storeW(h.dk, kt, mt, gk, h.scale)
	h.storeW(h.dv, kt, mt, gv, 1)
}

// emuTScores is tscores: p (keys x queries) becomes P, dp dS, the query
// columns col0.. with their lse and dsum in slse, sdot.
func emuTScores(p, dp [][]frag, slse, sdot []float32, cl float32, w0, col0, seq int, masked bool) {
	for lane := range 32 {
		g, c := lane>>2, lane&3
		for j := range len(p[0]) {
			for e := range 2 {
				jl := 8*j + 2*c + e
				col, ls := col0+jl, slse[jl]*1.4426950408889634
				for i := range p {
					for hh := range 2 {
						row, x := w0+16*i+g+8*hh, 2*hh+e
						pe := float32(0)
						if !masked || (col >= row && col < seq) {
							pe = exp2f(p[i][j][lane][x]*cl - ls)
						}
						p[i][j][lane][x] = pe
						dp[i][j][lane][x] = pe * (dp[i][j][lane][x] - sdot[jl])
					}
				}
			}
		}
	}
}

// emuStoreDS is store_ds: the dSᵀ fragments dp of a warp (key rows w0..,
// query columns col0..) rounded to bfloat16 into the tiles of a head.
func emuStoreDS(tiles []uint16, dp []frag, w0, col0 int) {
	for lane := range 32 {
		g, c := lane>>2, lane&3
		for n := range dp {
			for hh := range 2 {
				r, col := w0+g+8*hh, col0+8*n+2*c
				a, b := col>>6, r>>6
				i := (a*(a+1)/2+b)*4096 + (r&63)*64 + col&63
				tiles[i], tiles[i+1] = bf16.FromFloat32(dp[n][lane][2*hh]), bf16.FromFloat32(dp[n][lane][2*hh+1])
			}
		}
	}
}

// dqDS is flash_dq_ds's block a: 4 warps of 16 query rows, dQ from the dS
// tiles (a, 0..a) by ldmatrix.trans and the key tiles.
func (h *emuHead) dqDS(a int) {
	d := h.d
	sds, sk := make([]uint16, 64*64), make([]uint16, 64*d)
	acc := make([][][]frag, 4)
	for w := range 4 {
		acc[w] = frags(1, d/8)
	}
	for b := 0; b <= a; b++ {
		emuLoadTile(sds, h.ds[(a*(a+1)/2+b)*4096:], 64, 64, 0, 64)
		emuLoadTile(sk, h.k, d, 64, b*64, h.seq)
		for w := range 4 {
			for kk := 0; kk < 64; kk += 16 {
				var addrs [32]int
				for lane := range 32 {
					m := lane >> 3
					addrs[lane] = emuSidx(64, kk+8*(m>>1)+(lane&7), 16*w+8*(m&1))
				}
				af := emuLdm4(sds, &addrs, true)
				for n := 0; n < d/8; n += 2 {
					for lane := range 32 {
						m := lane >> 3
						addrs[lane] = emuSidx(d, kk+8*(m&1)+(lane&7), 8*n+8*(m>>1))
					}
					bf := emuLdm4(sk, &addrs, true)
					emuMMA2(acc[w][0][n:n+2], &af, &bf)
				}
			}
		}
	}
	h.storeW(h.dq, a, 1, acc, h.scale)
}
