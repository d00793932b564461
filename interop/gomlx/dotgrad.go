package gomlxinterop

import (
	"reflect"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// GoMLX v0.26.0 differentiates DotGeneral (pkg/core/graph/ops_helpers.go,
// dotGeneralVJP) without a matrix product: each operand's gradient is the
// output gradient broadcast against the other operand into [batch,
// lhsCross, rhsCross, contracted] and reduced. XLA runs those as
// reductions on CUDA cores, with no data reuse: for the 12 x 768 byte LM
// of the example at batch 16, 742G multiplied elements a step (the MLP's
// weight gradients are [16, 256, 3072, 768] each), about 0.45 s on an
// H200 where the products need a few milliseconds. dotGrad computes the
// same gradients as two DotGenerals (and a transpose each).

var (
	dotGradMu sync.Mutex
	// dotGradPrev and matGradPrev are the gradients of DotGeneral and Dot
	// that dotGrad and matGrad replaced, which they fall back to for a
	// node they do not take.
	dotGradPrev, matGradPrev graph.VJP
)

// UseDotGeneralGradient makes GoMLX differentiate DotGeneral (and so
// Dense, Einsum, attention) and the matrix-matrix Dot with matrix products
// instead of its own broadcast-and-reduce form, for every graph built
// after the call in this process: GoMLX keeps the gradients of its
// operations in one global registry (graph.VJPRegistration). It returns a
// function that puts the gradients found at the call back; calls and
// restores nest (restore in the reverse order of the calls). Call both
// before building graphs, not while graphs are being built. The gradients
// are the same up to the order of the float sums (TestDotGeneralGradient,
// TestDotGradient). A DotGeneral whose axes cannot be read (another GoMLX
// version), and a Dot of a vector, get the gradient found at the first
// call, GoMLX's own unless another package had replaced it.
func UseDotGeneralGradient() (restore func()) {
	dotGradMu.Lock()
	defer dotGradMu.Unlock()
	prevDot, prevMat := graph.VJPRegistration[graph.NodeTypeDotGeneral], graph.VJPRegistration[graph.NodeTypeDot]
	if dotGradPrev == nil {
		dotGradPrev, matGradPrev = prevDot, prevMat
	}
	graph.VJPRegistration[graph.NodeTypeDotGeneral] = dotGrad
	graph.VJPRegistration[graph.NodeTypeDot] = matGrad
	var once sync.Once
	return func() {
		once.Do(func() {
			dotGradMu.Lock()
			defer dotGradMu.Unlock()
			graph.VJPRegistration[graph.NodeTypeDotGeneral] = prevDot
			graph.VJPRegistration[graph.NodeTypeDot] = prevMat
		})
	}
}

// matGrad is the gradient of out = Dot(lhs [i, j], rhs [j, k]) = [i, k]:
// d lhs = v·rhsᵀ [i, j], d rhs = lhsᵀ·v [j, k]. Dots of vectors keep
// GoMLX's gradient (it broadcasts nothing larger than an operand there).
func matGrad(node *graph.Node, vjps []*graph.Node, out shapes.Shape) []*graph.Node {
	in := node.Inputs()
	if len(vjps) != 1 || len(in) != 2 || in[0].Rank() != 2 || in[1].Rank() != 2 {
		return matGradPrev(node, vjps, out)
	}
	v := vjps[0]
	gl := graph.DotGeneral(v, []int{1}, nil, fresh(in[1], v), []int{1}, nil)
	gr := graph.DotGeneral(fresh(in[0], v), []int{0}, nil, v, []int{0}, nil)
	return []*graph.Node{gl, gr}
}

// dotAxes returns the contracting and batch axes of a DotGeneral node.
// GoMLX v0.26.0 keeps them in unexported fields of the node's inputs
// (nodeInputsDotGeneral); ok is false where they are not found.
func dotAxes(n *graph.Node) (lc, lb, rc, rb []int, ok bool) {
	v := reflect.ValueOf(n)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, nil, nil, nil, false
	}
	in := v.Elem().FieldByName("inputs")
	for in.IsValid() && (in.Kind() == reflect.Interface || in.Kind() == reflect.Pointer) && !in.IsNil() {
		in = in.Elem()
	}
	if !in.IsValid() || in.Kind() != reflect.Struct {
		return nil, nil, nil, nil, false
	}
	ok = true
	get := func(name string) []int {
		f := in.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Int {
			ok = false
			return nil
		}
		out := make([]int, f.Len())
		for i := range out {
			out[i] = int(f.Index(i).Int())
		}
		return out
	}
	lc, lb, rc, rb = get("lhsContractingAxes"), get("lhsBatchAxes"), get("rhsContractingAxes"), get("rhsBatchAxes")
	return lc, lb, rc, rb, ok
}

// crossAxes are the axes of a rank-rank operand that are neither
// contracted nor batch, in order.
func crossAxes(rank int, contracting, batch []int) []int {
	var out []int
	for a := range rank {
		if !slices.Contains(contracting, a) && !slices.Contains(batch, a) {
			out = append(out, a)
		}
	}
	return out
}

// span returns from, from+1, ..., from+n-1.
func span(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// transposeTo returns x with its axes in the operand's order: inv[a] is
// the axis of x that holds the operand's axis a, and output axis a of
// GoMLX's TransposeAllAxes is input axis inv[a].
func transposeTo(x *graph.Node, inv []int) *graph.Node {
	if slices.Equal(inv, span(0, len(inv))) {
		return x
	}
	return graph.TransposeAllAxes(x, inv...)
}

// dotGrad is the gradient of out = DotGeneral(lhs, rhs): out's axes are
// [batch, lhsCross, rhsCross], v's too. Each operand's gradient contracts v
// with the other operand over the other's cross axes (operandGrad); an
// operand that is a decoded FP8 weight is decoded again there (fresh).
func dotGrad(node *graph.Node, vjps []*graph.Node, out shapes.Shape) []*graph.Node {
	lc, lb, rc, rb, ok := dotAxes(node)
	if !ok || len(vjps) != 1 || len(node.Inputs()) != 2 {
		return dotGradPrev(node, vjps, out)
	}
	v := vjps[0]
	lhs, rhs := node.Inputs()[0], node.Inputs()[1]
	nb := len(lb)
	lCross, rCross := crossAxes(lhs.Rank(), lc, lb), crossAxes(rhs.Rank(), rc, rb)
	vBatch, vL, vR := span(0, nb), span(nb, len(lCross)), span(nb+len(lCross), len(rCross))
	gl := operandGrad(v, vR, vBatch, fresh(rhs, v), rCross, rb, rc, lhs.Rank(), lb, lCross, lc)
	gr := operandGrad(v, vL, vBatch, fresh(lhs, v), lCross, lb, lc, rhs.Rank(), rb, rCross, rc)
	return []*graph.Node{gl, gr}
}

// operandGrad is the gradient of one operand of a DotGeneral (rank rank,
// axes batch, cross and contracting, contracting[k] paired with the other
// operand's otherContracting[k]) from the output gradient v: v contracted
// with the other operand over the other's cross axes (v's axes vOther)
// gives [batch, cross, the other's contracting axes in increasing order],
// then transposed to the operand's axis order.
func operandGrad(v *graph.Node, vOther, vBatch []int, other *graph.Node, otherCross, otherBatch, otherContracting []int,
	rank int, batch, cross, contracting []int) *graph.Node {
	g := graph.DotGeneral(v, vOther, vBatch, other, otherCross, otherBatch)
	sorted := slices.Sorted(slices.Values(otherContracting))
	inv := make([]int, rank) // inv[a]: the axis of g holding the operand's axis a
	for i, a := range batch {
		inv[a] = i
	}
	for j, a := range cross {
		inv[a] = len(batch) + j
	}
	for k, a := range contracting {
		inv[a] = len(batch) + len(cross) + slices.Index(sorted, otherContracting[k])
	}
	return transposeTo(g, inv)
}
