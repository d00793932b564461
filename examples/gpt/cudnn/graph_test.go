package cudnn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
)

// ref is causal attention in float64 on packed [batch, head, seq, d]
// arrays: the output, the log-sum-exp of every row and the gradients.
type ref struct {
	o, lse, dq, dk, dv []float64
}

// refAttention computes ref from q, k, v and the output gradient do
// (packed [batch, head, seq, d]).
func refAttention(s Shape, q, k, v, do []float64, scale float64) ref {
	T, D := s.Seq, s.D
	n := s.Batch * s.Heads
	r := ref{o: make([]float64, n*T*D), lse: make([]float64, n*T), dq: make([]float64, n*T*D),
		dk: make([]float64, n*T*D), dv: make([]float64, n*T*D)}
	dot := func(a, b []float64) (s float64) {
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	for bh := range n {
		row := func(x []float64, t int) []float64 { return x[(bh*T+t)*D : (bh*T+t+1)*D] }
		for i := range T {
			p := make([]float64, i+1)
			m := math.Inf(-1)
			for j := range p {
				p[j] = scale * dot(row(q, i), row(k, j))
				m = math.Max(m, p[j])
			}
			sum := 0.0
			for j := range p {
				p[j] = math.Exp(p[j] - m)
				sum += p[j]
			}
			r.lse[bh*T+i] = m + math.Log(sum)
			oi := row(r.o, i)
			for j := range p {
				p[j] /= sum
				for c := range D {
					oi[c] += p[j] * row(v, j)[c]
				}
			}
			di := dot(row(do, i), oi)
			for j := range p {
				ds := p[j] * (dot(row(do, i), row(v, j)) - di)
				for c := range D {
					row(r.dq, i)[c] += scale * ds * row(k, j)[c]
					row(r.dk, j)[c] += scale * ds * row(q, i)[c]
					row(r.dv, j)[c] += p[j] * row(do, i)[c]
				}
			}
		}
	}
	return r
}

// rowData holds the model's buffers (RowLayout) and packed copies of them.
type rowData struct {
	s               Shape
	qkv, do         []float64 // [batch·seq, 3·heads·d] and [batch·seq, heads·d]
	q, k, v, doPack []float64 // packed [batch, head, seq, d]
}

// randomRows fills qkv and do with bfloat16 values (exact in the graph's
// inputs) and their packed copies.
func randomRows(s Shape, seed uint64) *rowData {
	rng := rand.New(rand.NewPCG(seed, 1))
	w := s.Heads * s.D
	r := &rowData{s: s, qkv: make([]float64, s.Batch*s.Seq*3*w), do: make([]float64, s.Batch*s.Seq*w)}
	for _, x := range [][]float64{r.qkv, r.do} {
		for i := range x {
			x[i] = float64(bf16.Round(float32(2*rng.Float64() - 1)))
		}
	}
	r.q, r.k, r.v = r.pack(r.qkv, 3*w, 0), r.pack(r.qkv, 3*w, w), r.pack(r.qkv, 3*w, 2*w)
	r.doPack = r.pack(r.do, w, 0)
	return r
}

// pack copies the heads in columns off.. of a row-major [batch·seq, ld]
// array into packed [batch, head, seq, d].
func (r *rowData) pack(x []float64, ld, off int) []float64 {
	s := r.s
	out := make([]float64, s.Batch*s.Heads*s.Seq*s.D)
	for b := range s.Batch {
		for h := range s.Heads {
			for t := range s.Seq {
				for c := range s.D {
					out[((b*s.Heads+h)*s.Seq+t)*s.D+c] = x[(b*s.Seq+t)*ld+off+h*s.D+c]
				}
			}
		}
	}
	return out
}

// maxErr returns the largest |got - want| relative to the largest |want|.
func maxErr(got, want []float64) float64 {
	e, m := 0.0, 0.0
	for i := range want {
		e, m = math.Max(e, math.Abs(got[i]-want[i])), math.Max(m, math.Abs(want[i]))
	}
	return e / m
}

// normErr returns ||got - want|| / ||want|| (Frobenius).
func normErr(got, want []float64) float64 {
	e, m := 0.0, 0.0
	for i := range want {
		e += (got[i] - want[i]) * (got[i] - want[i])
		m += want[i] * want[i]
	}
	return math.Sqrt(e / m)
}

// runGraphs runs the forward graph and then the backward graph (in its
// repeatable form or not) on r in the model's layout; the backward pass
// reads the forward's o and statistics. mask is the masked score
// (maskValue). It returns what they wrote, packed.
func runGraphs(t *testing.T, r *rowData, exact bool, mask float32, repeatable bool) ref {
	t.Helper()
	s := r.s
	w, rows := s.Heads*s.D, s.Batch*s.Heads*s.Seq
	l, scale := RowLayout(s), graphScale(s)
	o, stats := make([]float64, s.Batch*s.Seq*w), make([]float64, rows)
	in := &interp{exact: exact}
	fwd := map[int64][]float64{uidQ: r.qkv, uidK: r.qkv[w:], uidV: r.qkv[2*w:], uidO: o, uidStats: stats}
	if err := in.run(forwardGraph(s, l, scale, mask), fwd); err != nil {
		t.Fatal(err)
	}
	dqkv := make([]float64, len(r.qkv))
	for i := range dqkv {
		dqkv[i] = math.NaN() // every element must be written
	}
	bwd := map[int64][]float64{uidQ: r.qkv, uidK: r.qkv[w:], uidV: r.qkv[2*w:], uidO: o, uidStats: stats,
		uidDO: r.do, uidDQ: dqkv, uidDK: dqkv[w:], uidDV: dqkv[2*w:], uidSoftmaxSum: make([]float64, rows)}
	if !repeatable {
		bwd[uidDQAccum] = make([]float64, rows*s.D)
	}
	if err := in.run(backwardGraph(s, l, scale, mask, repeatable), bwd); err != nil {
		t.Fatal(err)
	}
	return ref{o: r.pack(o, w, 0), lse: stats, dq: r.pack(dqkv, 3*w, 0), dk: r.pack(dqkv, 3*w, w), dv: r.pack(dqkv, 3*w, 2*w)}
}

// graphScale is the float32 score scale 1/sqrt(d) the graphs carry (the
// reference uses the same value).
func graphScale(s Shape) float32 { return float32(1 / math.Sqrt(float64(s.D))) }

var graphShapes = []Shape{{Batch: 2, Heads: 3, Seq: 9, D: 8}, {Batch: 1, Heads: 2, Seq: 16, D: 16}}

// graphMasks are the masked scores of the two version ranges (maskValue).
var graphMasks = []float32{maskValue(90500), maskValue(91900)}

// TestMaskValue checks the masked score per version, as cudnn-frontend
// picks it: the lowest finite float32 before cuDNN 9.10, -Inf from 9.10;
// and that both graphs carry it as their by-value "-inf".
func TestMaskValue(t *testing.T) {
	for _, c := range []struct {
		version int
		want    float32
	}{{90000, -math.MaxFloat32}, {90900, -math.MaxFloat32}, {91000, float32(math.Inf(-1))}, {91900, float32(math.Inf(-1))}} {
		mask := maskValue(c.version)
		if mask != c.want {
			t.Errorf("maskValue(%d) = %v, want %v", c.version, mask, c.want)
		}
		s := graphShapes[0]
		for _, g := range []*graph{forwardGraph(s, RowLayout(s), 0.5, mask), backwardGraph(s, RowLayout(s), 0.5, mask, false), backwardGraph(s, RowLayout(s), 0.5, mask, true)} {
			found := false
			for _, tt := range g.tensors {
				if tt.uid == uidNegInf {
					found = true
					if !tt.byValue || tt.value != c.want {
						t.Errorf("%s at version %d: masked score %v (by value %v), want %v", g.name, c.version, tt.value, tt.byValue, c.want)
					}
				}
			}
			if !found {
				t.Errorf("%s: no masked-score tensor", g.name)
			}
		}
	}
}

// TestGraphsExact runs the graphs handed to cuDNN on the CPU without
// rounding: they must be causal attention and its gradient exactly (to
// float64 rounding), in the model's interleaved layout, with the forward's
// statistics feeding the backward, in both forms of the backward.
func TestGraphsExact(t *testing.T) {
	for i, s := range graphShapes {
		r := randomRows(s, uint64(i))
		want := refAttention(s, r.q, r.k, r.v, r.doPack, float64(graphScale(s)))
		for _, mask := range graphMasks {
			for _, rep := range []bool{false, true} {
				got := runGraphs(t, r, true, mask, rep)
				for _, c := range []struct {
					name      string
					got, want []float64
				}{{"o", got.o, want.o}, {"stats", got.lse, want.lse}, {"dq", got.dq, want.dq}, {"dk", got.dk, want.dk}, {"dv", got.dv, want.dv}} {
					if e := maxErr(c.got, c.want); !(e < 1e-12) {
						t.Errorf("%v mask %v repeatable %v %s: max error %.3g relative to the largest value", s, mask, rep, c.name, e)
					}
				}
			}
		}
	}
}

// TestGraphsRounded runs them rounding every stored value to its tensor's
// type. Inputs are bfloat16, so the error comes from the bfloat16 stores:
// the probabilities before p·v and pᵀ·do, the score gradient before
// dsᵀ·q, and o, dq, dk, dv themselves, each a relative 2^-9 at most (and
// o, read back for do·o, once more): a few units of 2^-9 in norm, against
// the float64 reference. Float32 intermediates add 2^-24, nothing here.
func TestGraphsRounded(t *testing.T) {
	const tol = 6.0 / 512
	for i, s := range graphShapes {
		r := randomRows(s, uint64(10+i))
		want := refAttention(s, r.q, r.k, r.v, r.doPack, float64(graphScale(s)))
		for _, mask := range graphMasks {
			got := runGraphs(t, r, false, mask, false)
			for _, c := range []struct {
				name      string
				got, want []float64
			}{{"o", got.o, want.o}, {"dq", got.dq, want.dq}, {"dk", got.dk, want.dk}, {"dv", got.dv, want.dv}} {
				if e := normErr(c.got, c.want); !(e < tol) {
					t.Errorf("%v mask %v %s: relative error %.3g in norm, want below %.3g", s, mask, c.name, e, tol)
				}
			}
			if e := maxErr(got.lse, want.lse); !(e < 1e-6) {
				t.Errorf("%v mask %v stats: error %.3g (float32 throughout)", s, mask, e)
			}
			// The repeatable form rounds dq's float64 product to bfloat16
			// once, the other through float32 first: they differ only at
			// ties of the bfloat16 grid, which these inputs do not meet.
			rep := runGraphs(t, r, false, mask, true)
			for _, c := range []struct {
				name      string
				got, want []float64
			}{{"dq", rep.dq, got.dq}, {"dk", rep.dk, got.dk}, {"dv", rep.dv, got.dv}} {
				if e := maxErr(c.got, c.want); e != 0 {
					t.Errorf("%v mask %v repeatable %s: differs from the accumulating form by %.3g", s, mask, c.name, e)
				}
			}
		}
	}
}

// TestRepeatableForm checks the two forms of the backward graph: the
// accumulating one writes dq_accum (float32, packed) by the dq product and
// copies it to dQ; the repeatable one has no dq_accum, and its dq product
// writes dQ. And the workspace New allocates for each: the repeatable form
// trades dq's float32 accumulator for the bfloat16 score gradient of
// every head, sequences padded to 128 (at the 1.3B GPT's 4 x 16 heads x
// 2048: 512 MiB).
func TestRepeatableForm(t *testing.T) {
	s := Shape{Batch: 2, Heads: 3, Seq: 200, D: 64}
	writers := func(g *graph) map[string]int64 {
		w := map[string]int64{}
		for _, o := range g.ops {
			w[o.name] = o.out.uid
		}
		return w
	}
	acc, rep := writers(backwardGraph(s, RowLayout(s), 0.125, -1, false)), writers(backwardGraph(s, RowLayout(s), 0.125, -1, true))
	if acc["matmul_dS_K"] != uidDQAccum || acc["identity_dQ"] != uidDQ {
		t.Errorf("accumulating form: matmul_dS_K writes %d, identity_dQ %d; want %d and %d", acc["matmul_dS_K"], acc["identity_dQ"], uidDQAccum, uidDQ)
	}
	if _, ok := rep["identity_dQ"]; ok || rep["matmul_dS_K"] != uidDQ {
		t.Errorf("repeatable form: matmul_dS_K writes %d (want dQ, %d), identity_dQ present %v", rep["matmul_dS_K"], uidDQ, ok)
	}
	for _, tt := range backwardGraph(s, RowLayout(s), 0.125, -1, true).tensors {
		if tt.uid == uidDQAccum {
			t.Errorf("repeatable form has the tensor %s", tt.name)
		}
	}
	rows, pad := 2*3*200, 256
	c := Config{Shape: s, MaxWorkspace: 1 << 20}
	if got, want := WorkspaceBytes(c), 1<<20+4*rows+4*rows*64; got != want {
		t.Errorf("WorkspaceBytes accumulating: %d, want %d", got, want)
	}
	c.Repeatable = true
	if got, want := WorkspaceBytes(c), 1<<20+2*2*3*pad*pad+4*rows; got != want {
		t.Errorf("WorkspaceBytes repeatable: %d, want %d", got, want)
	}
	if got := scoreGradBytes(Shape{Batch: 4, Heads: 16, Seq: 2048, D: 128}); got != 512<<20 {
		t.Errorf("score gradient at 4 x 16 x 2048: %d bytes, want 512 MiB", got)
	}
}
