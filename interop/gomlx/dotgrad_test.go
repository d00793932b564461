package gomlxinterop

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// dotCase is one DotGeneral: operand dimensions and axes.
type dotCase struct {
	name       string
	ldims      []int
	lc, lb     []int
	rdims      []int
	rc, rb     []int
	wantOutDim []int
}

var dotCases = []dotCase{
	{"matmul", []int{5, 7}, []int{1}, nil, []int{7, 3}, []int{0}, nil, []int{5, 3}},
	{"dense (x·W, rank 3)", []int{2, 4, 6}, []int{2}, nil, []int{6, 5}, []int{0}, nil, []int{2, 4, 5}},
	{"contracting first", []int{7, 5}, []int{0}, nil, []int{3, 7}, []int{1}, nil, []int{5, 3}},
	{"batched", []int{3, 4, 6}, []int{2}, []int{0}, []int{3, 6, 5}, []int{1}, []int{0}, []int{3, 4, 5}},
	{"batch axes inside", []int{4, 3, 6}, []int{2}, []int{1}, []int{6, 3, 5}, []int{0}, []int{1}, []int{3, 4, 5}},
	{"attention scores (bqhd,bkhd->bhqk)", []int{2, 5, 3, 4}, []int{3}, []int{0, 2}, []int{2, 6, 3, 4}, []int{3}, []int{0, 2}, []int{2, 3, 5, 6}},
	{"two contracting axes, out of order", []int{3, 4, 5}, []int{2, 0}, nil, []int{4, 5, 3, 2}, []int{1, 2}, nil, []int{4, 4, 2}},
	{"outer product", []int{3, 1}, nil, nil, []int{2}, nil, nil, []int{3, 1, 2}},
	{"batch axes in another order", []int{2, 4, 3}, nil, []int{0, 2}, []int{3, 5, 2}, nil, []int{2, 0}, []int{2, 3, 4, 5}},
	{"contracting axes decreasing on rhs", []int{3, 4, 2}, []int{0, 1}, nil, []int{4, 2, 3}, []int{2, 0}, nil, []int{2, 2}},
	{"scalars", []int{}, nil, nil, []int{}, nil, nil, []int{}},
}

// randFloats returns n float64 values in [-1, 1) from seed.
func randFloats(n int, seed uint64) []float64 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]float64, n)
	for i := range out {
		out[i] = 2*r.Float64() - 1
	}
	return out
}

func prod(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// TestDotGeneralGradient checks UseDotGeneralGradient against GoMLX's own
// gradient of DotGeneral (the independent reference): for each case, the
// gradients of sum(DotGeneral(lhs, rhs) ∘ w) with respect to lhs and rhs,
// in float64 on simplego, must agree to 1e-12 of their largest value (the
// float sums run in another order). It also checks that the axes are read
// from the node (dotAxes), and that restore puts GoMLX's gradient back.
func TestDotGeneralGradient(t *testing.T) {
	be, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	for i, c := range dotCases {
		t.Run(c.name, func(t *testing.T) {
			l := tensors.FromFlatDataAndDimensions(randFloats(prod(c.ldims), uint64(3*i)), c.ldims...)
			r := tensors.FromFlatDataAndDimensions(randFloats(prod(c.rdims), uint64(3*i+1)), c.rdims...)
			w := tensors.FromFlatDataAndDimensions(randFloats(prod(c.wantOutDim), uint64(3*i+2)), c.wantOutDim...)
			grads := func() ([]float64, []float64) {
				exec, err := graph.NewExec(be, func(l, r, w *graph.Node) []*graph.Node {
					out := graph.DotGeneral(l, c.lc, c.lb, r, c.rc, c.rb)
					if fmt.Sprint(out.Shape().Dimensions) != fmt.Sprint(c.wantOutDim) {
						t.Fatalf("DotGeneral's output %v, want %v", out.Shape().Dimensions, c.wantOutDim)
					}
					lc, lb, rc, rb, ok := dotAxes(out)
					if !ok || fmt.Sprint(lc, lb, rc, rb) != fmt.Sprint(nz(c.lc), nz(c.lb), nz(c.rc), nz(c.rb)) {
						t.Errorf("dotAxes: %v %v %v %v (ok %v), want %v %v %v %v", lc, lb, rc, rb, ok, c.lc, c.lb, c.rc, c.rb)
					}
					return graph.Gradient(graph.ReduceAllSum(graph.Mul(out, w)), l, r)
				})
				if err != nil {
					t.Fatal(err)
				}
				res, err := exec.Exec(l, r, w)
				if err != nil {
					t.Fatal(err)
				}
				gl, err := tensors.CopyFlatData[float64](res[0])
				if err != nil {
					t.Fatal(err)
				}
				gr, err := tensors.CopyFlatData[float64](res[1])
				if err != nil {
					t.Fatal(err)
				}
				return gl, gr
			}
			wantL, wantR := grads()
			restore := UseDotGeneralGradient()
			gotL, gotR := grads()
			restore()
			againL, _ := grads()
			for _, x := range []struct {
				name      string
				got, want []float64
			}{{"d lhs", gotL, wantL}, {"d rhs", gotR, wantR}, {"d lhs after restore", againL, wantL}} {
				if e := relMax(x.got, x.want); !(e <= 1e-12) {
					t.Errorf("%s: differs from GoMLX's gradient by %.3g of its largest value", x.name, e)
				}
			}
		})
	}
}

// nz returns s, or an empty slice for nil (dotAxes returns empty slices).
func nz(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

// relMax is the largest |got - want| over the largest |want|; +Inf when
// the lengths differ.
func relMax(got, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var e, m float64
	for i := range want {
		e = max(e, math.Abs(got[i]-want[i]))
		m = max(m, math.Abs(want[i]))
	}
	return e / m
}

// TestDotGradient checks UseDotGeneralGradient's gradient of Dot against
// GoMLX's own, for a matrix times a matrix (replaced) and a matrix times a
// vector (GoMLX's kept), as TestDotGeneralGradient does.
func TestDotGradient(t *testing.T) {
	be, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	for i, c := range []struct {
		name         string
		ldims, rdims []int
		out          []int
	}{{"matrix x matrix", []int{5, 7}, []int{7, 3}, []int{5, 3}}, {"matrix x vector", []int{4, 6}, []int{6}, []int{4}}} {
		t.Run(c.name, func(t *testing.T) {
			l := tensors.FromFlatDataAndDimensions(randFloats(prod(c.ldims), uint64(50+3*i)), c.ldims...)
			r := tensors.FromFlatDataAndDimensions(randFloats(prod(c.rdims), uint64(51+3*i)), c.rdims...)
			w := tensors.FromFlatDataAndDimensions(randFloats(prod(c.out), uint64(52+3*i)), c.out...)
			grads := func() [][]float64 {
				exec, err := graph.NewExec(be, func(l, r, w *graph.Node) []*graph.Node {
					return graph.Gradient(graph.ReduceAllSum(graph.Mul(graph.Dot(l, r), w)), l, r)
				})
				if err != nil {
					t.Fatal(err)
				}
				res, err := exec.Exec(l, r, w)
				if err != nil {
					t.Fatal(err)
				}
				var out [][]float64
				for _, x := range res {
					f, err := tensors.CopyFlatData[float64](x)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, f)
				}
				return out
			}
			want := grads()
			restore := UseDotGeneralGradient()
			got := grads()
			restore()
			for k, name := range []string{"d lhs", "d rhs"} {
				if e := relMax(got[k], want[k]); !(e <= 1e-12) {
					t.Errorf("%s: differs from GoMLX's gradient by %.3g of its largest value", name, e)
				}
			}
		})
	}
}
