package cublaslt

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// elems returns how many elements a buffer holding every matrix of m needs.
func (m Matrix) elems() int {
	return (m.batch()-1)*int(m.Stride) + (m.Cols-1)*m.LD + m.Rows
}

// at returns the offset of element (r, c) of matrix i of m.
func (m Matrix) at(i, r, c int) int { return i*int(m.Stride) + c*m.LD + r }

// refMatmul computes D = op(A)·op(B) of every matrix of the batch in
// float64 from the float32 contents of a and b, into a copy of d (elements
// outside D's matrices keep their values).
func refMatmul(s Spec, a, b, d []float32, k int) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v)
	}
	opA := func(i, r, c int) float64 {
		if s.TransA == OpT {
			r, c = c, r
		}
		return float64(a[s.A.at(i, r, c)])
	}
	opB := func(i, r, c int) float64 {
		if s.TransB == OpT {
			r, c = c, r
		}
		return float64(b[s.B.at(i, r, c)])
	}
	for i := range s.D.batch() {
		for r := range s.D.Rows {
			for c := range s.D.Cols {
				sum := 0.0
				for x := range k {
					sum += opA(i, r, x) * opB(i, x, c)
				}
				out[s.D.at(i, r, c)] = sum
			}
		}
	}
	return out
}

// TestBatchedMatmul runs FP32 strided-batched products in the two shapes
// the attention of examples/gpt uses (matrices interleaved in one row-major
// activation, read transposed or written side by side; odd sizes, 4-byte
// alignment) with full FP32 compute and with TF32, against a float64
// product of the same float32 inputs. FP32 must agree to 1e-5 of the
// largest |D| (only the order of the sums differs); TF32, which rounds
// each input to 10 mantissa bits, to 4e-3 of it (a few 2^-11 steps of the
// inputs, averaged over K terms). D's elements outside its matrices (the
// gaps of an interleaved layout) must stay as they were.
func TestBatchedMatmul(t *testing.T) {
	h, s := openHandle(t)
	const batch, m, n, k = 3, 5, 7, 6
	shapes := map[string]Spec{
		// D = Aᵀ·B: A and B interleaved, K contiguous (scores = q·kᵀ).
		"TN interleaved inputs": {TransA: OpT, TransB: OpN,
			A: Matrix{Type: R32F, Rows: k, Cols: m, LD: 3*batch*k + 1, Batch: batch, Stride: k, Align: 4},
			B: Matrix{Type: R32F, Rows: k, Cols: n, LD: batch*k + 2, Batch: batch, Stride: k, Align: 4},
			D: Matrix{Type: R32F, Rows: m, Cols: n, LD: m, Batch: batch, Stride: m * n, Align: 4}},
		// D = A·Bᵀ written interleaved (the output of p·v, dk = dsᵀ·q).
		"NT interleaved output": {TransA: OpN, TransB: OpT,
			A: Matrix{Type: R32F, Rows: m, Cols: k, LD: m, Batch: batch, Stride: m * k, Align: 4},
			B: Matrix{Type: R32F, Rows: n, Cols: k, LD: n + 1, Batch: batch, Stride: (n + 1) * k, Align: 4},
			D: Matrix{Type: R32F, Rows: m, Cols: n, LD: batch*m + 3, Batch: batch, Stride: m, Align: 4}},
	}
	for name, spec := range shapes {
		spec.C = spec.D
		for _, c := range []struct {
			compute ComputeType
			tol     float64
		}{{Compute32F, 1e-5}, {Compute32FFastTF32, 4e-3}} {
			spec.Compute = c.compute
			t.Run(name+"/"+map[ComputeType]string{Compute32F: "FP32", Compute32FFastTF32: "TF32"}[c.compute], func(t *testing.T) {
				checkBatched(t, h, s, spec, k, c.tol)
			})
		}
	}
}

func checkBatched(t *testing.T, h *Handle, s *cuda.Stream, spec Spec, k int, tol float64) {
	d := h.Device()
	r := rand.New(rand.NewPCG(7, uint64(spec.Compute)))
	host := func(m Matrix) []float32 {
		v := make([]float32, m.elems())
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	a, b, out := host(spec.A), host(spec.B), host(spec.D)
	up := func(v []float32) cuda.DevicePtr {
		p := cudatest.Alloc(t, d, 4*len(v)+16)
		if err := s.Upload(p.Add(4), cuda.Bytes(v)); err != nil { // 4-byte aligned on purpose
			t.Fatal(err)
		}
		return p.Add(4)
	}
	pa, pb, pd := up(a), up(b), up(out)
	ws := cudatest.Alloc(t, d, 1<<22)
	plan, err := h.NewPlan(spec, 1<<22, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Destroy()
	if err := plan.Run(s, &Args{A: pa, B: pb, C: pd, D: pd, Alpha: 1, Workspace: ws, WorkspaceSize: 1 << 22}); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(out))
	if err := s.Download(cuda.Bytes(got), pd); err != nil {
		t.Fatal(err)
	}
	want := refMatmul(spec, a, b, out, k)
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for i, w := range want {
		if diff := math.Abs(float64(got[i]) - w); !(diff <= tol*scale) {
			t.Fatalf("D[%d] = %v, reference %v (difference %.3g, scale %.3g)", i, got[i], w, diff, scale)
		}
	}
}

// TestSpecValidate checks that batch counts that differ, negative strides
// and impossible alignments are refused before any library call, with
// errors matching ErrInvalid that name the operand.
func TestSpecValidate(t *testing.T) {
	ok := Matrix{Type: R32F, Rows: 4, Cols: 4, LD: 4, Batch: 2, Stride: 16}
	good := Spec{A: ok, B: ok, C: ok, D: ok}
	if err := good.validate(); err != nil {
		t.Fatalf("a valid spec: %v", err)
	}
	one := Spec{A: Matrix{Type: R32F, Rows: 4, Cols: 4, LD: 4}, B: Matrix{Type: R32F, Rows: 4, Cols: 4, LD: 4, Batch: 1}}
	one.C, one.D = one.A, one.A
	if err := one.validate(); err != nil {
		t.Fatalf("batch 0 and 1 are the same: %v", err)
	}
	bad := map[string]func(*Spec){
		"batch mismatch":   func(s *Spec) { s.B.Batch = 3 },
		"negative stride":  func(s *Spec) { s.D.Stride = -1 },
		"negative batch":   func(s *Spec) { s.A.Batch, s.B.Batch, s.C.Batch, s.D.Batch = -1, -1, -1, -1 },
		"alignment not 2^": func(s *Spec) { s.C.Align = 12 },
		"alignment small":  func(s *Spec) { s.A.Align = 2 },
		"alignment large":  func(s *Spec) { s.A.Align = 512 },
	}
	for name, f := range bad {
		s := good
		f(&s)
		if err := s.validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want an error matching ErrInvalid", name, err)
		}
	}
}
