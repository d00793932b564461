package kernels

import (
	"fmt"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"math"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
)

// quantInput returns n test values as the device bytes of element type e
// and their exact float32 values (bfloat16 inputs are the values rounded
// to bfloat16).
func quantInput(n int, e Elem, seed uint64) ([]byte, []float32) {
	v := testValues(n, seed)
	if e == F32 {
		return cuda.Bytes(v), v
	}
	h := make([]uint16, n)
	for i, x := range v {
		h[i] = fp8.BF16FromFloat32(x)
		v[i] = fp8.Float32FromBF16(h[i])
	}
	return cuda.Bytes(h), v
}

type quantCase struct {
	e      Elem
	f      fp8.Format
	margin int
	pow2   bool
}

func quantCases() []quantCase {
	var cs []quantCase
	for _, e := range []Elem{F32, BF16} {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			cs = append(cs, quantCase{e, f, 0, false}, quantCase{e, f, 2, true})
		}
	}
	return cs
}

func (c quantCase) String() string {
	return fmt.Sprintf("%s/%v/margin=%d/pow2=%t", c.e.suffix(), c.f, c.margin, c.pow2)
}

func finiteValues(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			x = 1
		}
		out[i] = x
	}
	return out
}

// TestQuantTensor runs current scaling on the GPU (QuantAmax, QuantScale,
// QuantCast) and compares codes, scale_inv and amax with fp8.Quantize
// (TensorCurrent), bit for bit; inputs with and without NaN/Inf.
func TestQuantTensor(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	for _, k := range sets {
		for _, c := range quantCases() {
			for _, n := range []int{1, 5, 4096, 100003} {
				for _, finite := range []bool{true, false} {
					t.Run(fmt.Sprintf("%v/%v/n=%d/finite=%t", k.v, c, n, finite), func(t *testing.T) {
						checkQuantTensor(t, k, s, c, n, finite)
					})
				}
			}
		}
	}
}

func checkQuantTensor(t *testing.T, k *Set, s *cuda.Stream, c quantCase, n int, finite bool) {
	d := s.Device()
	raw, vals := quantInput(n, c.e, uint64(n))
	if finite {
		vals = finiteValues(vals)
		raw, vals = reencode(vals, c.e)
	}
	src := cudatest.Alloc(t, d, len(raw))
	must(t, s.Upload(src, raw))
	aux := cudatest.Alloc(t, d, 16) // amax, scale, scale_inv, cast amax
	must(t, s.Memset32(aux, 0, 4))
	out := newGuarded(t, d, s, n, 0)
	must(t, k.QuantAmax(s, src, n, c.e, aux))
	must(t, k.QuantScale(s, aux, aux.Add(4), aux.Add(8), c.f, c.margin, c.pow2))
	must(t, k.QuantCast(s, out.ptr(), src, n, c.e, c.f, aux.Add(4), aux.Add(12)))
	got := out.read(t, s)
	w := make([]uint32, 4)
	must(t, s.Download(cuda.Bytes(w), aux))
	r := fp8.Recipe{Format: c.f, Scaling: fp8.TensorCurrent, Margin: c.margin, PowerOf2: c.pow2}
	want, err := fp8.Quantize(vals, []int{n}, r, nil)
	must(t, err)
	amax := math.Float32bits(fp8.Amax(vals))
	if w[0] != amax || w[3] != amax {
		t.Errorf("amax bits %#x (pass) %#x (cast), want %#x", w[0], w[3], amax)
	}
	if w[2] != math.Float32bits(want.ScaleInv[0]) {
		t.Errorf("scale_inv %v, want %v", math.Float32frombits(w[2]), want.ScaleInv[0])
	}
	if i := firstDiff(got, want.Data); i >= 0 {
		t.Errorf("code %d of %v: %#x, want %#x", i, vals[i], got[i], want.Data[i])
	}
}

// reencode returns the device bytes of vals in element type e and the
// values they hold.
func reencode(vals []float32, e Elem) ([]byte, []float32) {
	if e == F32 {
		return cuda.Bytes(vals), vals
	}
	h := make([]uint16, len(vals))
	out := make([]float32, len(vals))
	for i, x := range vals {
		h[i] = fp8.BF16FromFloat32(x)
		out[i] = fp8.Float32FromBF16(h[i])
	}
	return cuda.Bytes(h), out
}

// TestQuantBlocks128 casts matrices of odd and even shapes in 1x128 blocks
// along rows (QuantRows128) and down columns (QuantCols128, transposed
// output) and compares every code and scale_inv with fp8.CastBlocks1D
// applied to each row or column, bit for bit, and the amax with fp8.Amax.
func TestQuantBlocks128(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	shapes := [][2]int{{1, 1}, {1, 128}, {3, 129}, {130, 5}, {128, 256}, {257, 300}, {64, 2048}}
	for _, k := range sets {
		for _, c := range quantCases() {
			for _, sh := range shapes {
				for _, cols := range []bool{false, true} {
					t.Run(fmt.Sprintf("%v/%v/%dx%d/cols=%t", k.v, c, sh[0], sh[1], cols), func(t *testing.T) {
						checkBlocks128(t, k, s, c, sh[0], sh[1], cols)
					})
				}
			}
		}
	}
}

func checkBlocks128(t *testing.T, k *Set, s *cuda.Stream, c quantCase, rows, cols int, down bool) {
	d := s.Device()
	raw, vals := quantInput(rows*cols, c.e, uint64(rows*1000+cols))
	src := cudatest.Alloc(t, d, len(raw))
	must(t, s.Upload(src, raw))
	outer, inner := rows, cols // rows of the FP8 output and their length
	if down {
		outer, inner = cols, rows
	}
	nb := (inner + 127) / 128
	ld := outer + 3
	out := newGuarded(t, d, s, rows*cols, 0)
	sc := newGuarded(t, d, s, 4*nb*ld, 0)
	amax := cudatest.Alloc(t, d, 4)
	must(t, s.Memset32(amax, 0, 1))
	if down {
		must(t, k.QuantCols128(s, out.ptr(), sc.ptr(), ld, src, rows, cols, c.e, c.f, c.margin, c.pow2, amax))
	} else {
		must(t, k.QuantRows128(s, out.ptr(), sc.ptr(), ld, src, rows, cols, c.e, c.f, c.margin, c.pow2, amax))
	}
	got := out.read(t, s)
	gotScale := sc.read(t, s)
	var gotAmax [1]uint32
	must(t, s.Download(cuda.Bytes(gotAmax[:]), amax))
	if want := math.Float32bits(fp8.Amax(vals)); gotAmax[0] != want {
		t.Errorf("amax %#x, want %#x", gotAmax[0], want)
	}
	line := make([]float32, inner)
	code := make([]byte, inner)
	inv := make([]float32, nb)
	for o := range outer {
		for i := range inner {
			if down {
				line[i] = vals[i*cols+o]
			} else {
				line[i] = vals[o*cols+i]
			}
		}
		fp8.CastBlocks1D(code, inv, line, 128, c.f, c.margin, c.pow2)
		if j := firstDiff(got[o*inner:(o+1)*inner], code); j >= 0 {
			t.Fatalf("line %d element %d (%v): code %#x, want %#x", o, j, line[j], got[o*inner+j], code[j])
		}
		for b := range nb {
			g := cuda.View[uint32](gotScale[4*(b*ld+o) : 4*(b*ld+o)+4])[0]
			if g != math.Float32bits(inv[b]) {
				t.Fatalf("line %d block %d: scale_inv %v, want %v", o, b, math.Float32frombits(g), inv[b])
			}
		}
	}
}
