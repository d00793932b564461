package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/fp8"
)

// amaxKey is the amax key of v on the CPU, from fp8.Amax: what gemm's
// amax pass folds.
func amaxKey(v []float32) uint32 { return math.Float32bits(fp8.Amax(v)) & 0x7fffffff }

// widened returns the float32 values of the bfloat16 codes in b.
func widened(b []uint16) []float32 {
	v := make([]float32, len(b))
	for i, h := range b {
		v[i] = bf16.ToFloat32(h)
	}
	return v
}

// bwdEnv adds to fusedEnv what the backward kernels' tests read back.
type bwdEnv struct{ *fusedEnv }

// halves downloads n bfloat16 codes at p.
func (e bwdEnv) halves(p cuda.DevicePtr, n int) []uint16 {
	v := make([]uint16, n)
	must(e.t, e.s.Download(cuda.Bytes(v), p))
	return v
}

// key checks the uint32 at amax against want.
func (e bwdEnv) key(name string, amax cuda.DevicePtr, want uint32) {
	e.t.Helper()
	got := make([]uint32, 1)
	must(e.t, e.s.Download(cuda.Bytes(got), amax))
	if got[0] != want {
		e.t.Errorf("%s: amax key %#x, want %#x", name, got[0], want)
	}
}

// TestGPTLayerNormGradXAmax checks GPTLayerNormGradXAmax against today's
// GPTLayerNormGradX, bit for bit, in every variant the device loads and
// every shape of fusedShapes (each register variant, the any-width
// kernel): dx (accumulated onto the same prior values) must be the same,
// and the amax key the CPU's fp8.Amax of the dx read back (a stale key
// is set first, which the launcher must clear). With a bfloat16 dy the
// reference is GPTLayerNormGradX of the widened dy; the bfloat16 weight
// and bias sums (GPTLayerNormGradWBBF16) are checked so too.
func TestGPTLayerNormGradXAmax(t *testing.T) {
	d, sets := loadAll(t)
	e := bwdEnv{&fusedEnv{t: t, d: d, s: cudatest.Stream(t, d), r: rand.New(rand.NewPCG(5, 11))}}
	amax := cudatest.Alloc(t, d, 4)
	for _, k := range sets {
		for _, sh := range fusedShapes {
			rows, n := sh[0], sh[1]
			for _, half := range []bool{false, true} {
				name := fmt.Sprintf("%v/%dx%d/bf16=%v", k.Library().Variant(), rows, n, half)
				x, mean, rstd := e.f32(rows*n, 0.3, 2), e.f32(rows, 0.3, 0.01), e.f32(rows, 0.5, 0.1)
				w := e.bf(n, 1, 0.2)
				dy32 := e.f32(rows*n, 0, 1e-3)
				dy := dy32
				if half {
					dy = e.bf(rows*n, 0, 1e-3)
					must(t, e.s.Upload(dy32, cuda.Bytes(widened(e.halves(dy, rows*n)))))
				}
				want, got := e.f32(rows*n, 0, 1e-2), cudatest.Alloc(t, d, 4*rows*n)
				must(t, e.s.CopyDtoD(got, want, 4*rows*n))
				must(t, k.GPTLayerNormGradX(e.s, want, dy32, x, mean, rstd, w, rows, n))
				must(t, e.s.Memset32(amax, 0x7f800000, 1))
				must(t, k.GPTLayerNormGradXAmax(e.s, got, dy, x, mean, rstd, w, amax, rows, n, half))
				ref := e.bytes(want, 4*rows*n)
				e.same(name+" dx", e.bytes(got, 4*rows*n), ref)
				e.key(name, amax, amaxKey(e.floats(want, rows*n)))
				if !half {
					continue
				}
				gw, gb, rw, rb := e.f32(n, 0, 1), e.f32(n, 0, 1), cudatest.Alloc(t, d, 4*n), cudatest.Alloc(t, d, 4*n)
				must(t, e.s.CopyDtoD(rw, gw, 4*n))
				must(t, e.s.CopyDtoD(rb, gb, 4*n))
				must(t, k.GPTLayerNormGradWB(e.s, rw, rb, dy32, x, mean, rstd, rows, n))
				must(t, k.GPTLayerNormGradWBBF16(e.s, gw, gb, dy, x, mean, rstd, rows, n))
				e.same(name+" dw", e.bytes(gw, 4*n), e.bytes(rw, 4*n))
				e.same(name+" db", e.bytes(gb, 4*n), e.bytes(rb, 4*n))
			}
		}
	}
}

// TestGPTGELUGradAmax checks GPTGELUGradAmax against today's
// GPTGELUGradBF16 in every variant the device loads, lengths a multiple
// of 8 (bfloat16's eight-wide path), of 4 only (the four-wide one) and
// neither (the scalar path), and a pointer off the vector alignment:
// float32, dx bit for bit and the amax key the CPU's fp8.Amax of it;
// bfloat16, dx the nearest-even rounding (bf16.FromFloat32) of
// GPTGELUGradBF16 on the widened dy, the key that of the rounded values.
// GPTColumnSumBF16 of the bfloat16 dx is checked against GPTColumnSum of
// its widened values, bit for bit.
func TestGPTGELUGradAmax(t *testing.T) {
	d, sets := loadAll(t)
	e := bwdEnv{&fusedEnv{t: t, d: d, s: cudatest.Stream(t, d), r: rand.New(rand.NewPCG(6, 13))}}
	amax := cudatest.Alloc(t, d, 4)
	for _, k := range sets {
		for _, sh := range [][2]int{{64, 512}, {3, 1028}, {37, 130}, {9, 2047}} {
			rows, n := sh[0], sh[1]
			for _, half := range []bool{false, true} {
				for _, off := range []int{0, 1} {
					name := fmt.Sprintf("%v/%dx%d/bf16=%v/offset=%d", k.Library().Variant(), rows, n, half, off)
					cnt := rows*n - off
					fc := e.bf(rows*n, 0, 2) + cuda.DevicePtr(2*off)
					dy32 := e.f32(rows*n, 0, 1e-3) + cuda.DevicePtr(4*off)
					dy := dy32
					if half {
						dy = e.bf(rows*n, 0, 1e-3) + cuda.DevicePtr(2*off)
						must(t, e.s.Upload(dy32, cuda.Bytes(widened(e.halves(dy, cnt)))))
					}
					want := cudatest.Alloc(t, d, 4*rows*n)
					must(t, k.GPTGELUGradBF16(e.s, want, dy32, fc, cnt))
					ref := e.floats(want, cnt)
					must(t, e.s.Memset32(amax, 0x7f800000, 1))
					if !half {
						got := cudatest.Alloc(t, d, 4*rows*n) + cuda.DevicePtr(4*off)
						must(t, k.GPTGELUGradAmax(e.s, got, dy, fc, amax, cnt, false))
						e.same(name+" dx", e.bytes(got, 4*cnt), cuda.Bytes(ref))
						e.key(name, amax, amaxKey(ref))
						continue
					}
					got := cudatest.Alloc(t, d, 2*rows*n) + cuda.DevicePtr(2*off)
					must(t, k.GPTGELUGradAmax(e.s, got, dy, fc, amax, cnt, true))
					rounded := make([]uint16, cnt)
					for i, v := range ref {
						rounded[i] = bf16.FromFloat32(v)
					}
					e.same(name+" dx", e.bytes(got, 2*cnt), cuda.Bytes(rounded))
					e.key(name, amax, amaxKey(widened(rounded)))
					if off == 0 {
						must(t, e.s.Upload(want, cuda.Bytes(widened(rounded))))
						rs, gs := e.f32(n, 0, 1), cudatest.Alloc(t, d, 4*n)
						must(t, e.s.CopyDtoD(gs, rs, 4*n))
						must(t, k.GPTColumnSum(e.s, rs, want, rows, n))
						must(t, k.GPTColumnSumBF16(e.s, gs, got, rows, n))
						e.same(name+" column sums", e.bytes(gs, 4*n), e.bytes(rs, 4*n))
					}
				}
			}
		}
	}
}

// TestGPTDYCast checks GPTDYCast in every variant the device loads, for
// float32 and bfloat16 dy, both formats and shapes that cover a full tile
// (256 rows x 128 columns), partial chunks and column tiles, a width that
// is not a multiple of 4 (the scalar path), an odd row count (the byte
// stores of the transpose), a dy off the vector alignment and codes
// written one byte off the word alignment (the byte stores of both
// outputs): the codes
// against the fp8 package's CastScaled of the (widened) values at the
// same scale, the transpose against those codes transposed, and the bias
// sums against GPTColumnSum (or GPTColumnSumBF16) of the same dy onto the
// same prior values, bit for bit.
func TestGPTDYCast(t *testing.T) {
	d, sets := loadAll(t)
	e := bwdEnv{&fusedEnv{t: t, d: d, s: cudatest.Stream(t, d), r: rand.New(rand.NewPCG(7, 17))}}
	const sc = 1024 // the scale: dy of standard deviation 1e-3 spans E5M2's and E4M3's normal range
	scale := cudatest.Alloc(t, d, 4)
	must(t, e.s.Upload(scale, cuda.Bytes([]float32{sc})))
	// rows, n, dy's offset in elements, the codes' offset in bytes
	shapes := [][4]int{{512, 256, 0, 0}, {300, 200, 0, 0}, {64, 130, 0, 0}, {257, 768, 0, 0}, {33, 36, 1, 0}, {260, 132, 0, 1}}
	for _, k := range sets {
		for _, sh := range shapes {
			rows, n, off, coff := sh[0], sh[1], sh[2], sh[3]
			for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
				for _, half := range []bool{false, true} {
					name := fmt.Sprintf("%v/%dx%d+%d+%d/%v/bf16=%v", k.Library().Variant(), rows, n, off, coff, f, half)
					m := rows * n
					dy := e.f32(m+off, 0, 1e-3) + cuda.DevicePtr(4*off)
					if half {
						dy = e.bf(m+off, 0, 1e-3) + cuda.DevicePtr(2*off)
					}
					var vals []float32
					if half {
						vals = widened(e.halves(dy, m))
					} else {
						vals = e.floats(dy, m)
					}
					codes := cudatest.Alloc(t, d, m+coff) + cuda.DevicePtr(coff)
					codesT := cudatest.Alloc(t, d, m+coff) + cuda.DevicePtr(coff)
					db, ref := e.f32(n, 0, 1), cudatest.Alloc(t, d, 4*n)
					must(t, e.s.CopyDtoD(ref, db, 4*n))
					must(t, k.GPTDYCast(e.s, codes, codesT, db, dy, scale, rows, n, f, half))
					sum := k.GPTColumnSum
					if half {
						sum = k.GPTColumnSumBF16
					}
					must(t, sum(e.s, ref, dy, rows, n))
					want := make([]byte, m)
					fp8.CastScaled(want, vals, sc, f)
					wantT := make([]byte, m)
					for r := range rows {
						for i := range n {
							wantT[i*rows+r] = want[r*n+i]
						}
					}
					e.same(name+" codes", e.bytes(codes, m), want)
					e.same(name+" transposed codes", e.bytes(codesT, m), wantT)
					e.same(name+" bias sums", e.bytes(db, 4*n), e.bytes(ref, 4*n))
				}
			}
		}
	}
}
