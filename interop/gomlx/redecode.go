package gomlxinterop

import (
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// XLA keeps every value that backward reads alive from forward to
// backward. The DotGeneral gradient reads each linear layer's weights, so
// a graph that decodes the FP8 weights once would hold the whole model in
// float32 (4 bytes per parameter) at the end of the forward pass: the copy
// the hand-over exists to avoid. WeightGradExec marks each decoded weight
// with a function that decodes it again, and dotGrad and matGrad read the
// fresh decode instead, so each decode lives only around the product that
// reads it. The fresh decode reads its codes through max(code, min(code,
// s)), s one element of the product's output gradient: the same codes,
// but a computation XLA can neither merge with the forward's decode (its
// common-subexpression pass would make the two one value again, kept as
// before) nor schedule before backward reaches the product (its inputs
// being the graph's parameters, XLA's scheduler ran a decode without that
// dependence at the start of the graph, which kept all of them alive as
// long: measured on an H100, scripts/gpu/NOTES.md, twentieth session).

// redecodes maps a decoded weight node to its mark, while its graph is
// being built.
var redecodes sync.Map

// redecoded counts the fresh decodes made, and earlyGrads the gradients
// converted to bfloat16 in backward, for the tests.
var redecoded, earlyGrads atomic.Int64

// mark is what backward may do with a decoded weight: decode it again
// (again(after), after the scalar after exists), and, where early is set,
// round its gradient to bfloat16 at once (early(g) returns the rounded
// gradient in distopt's layout, undo(b) the gradient backward goes on with).
type mark struct {
	again       func(after *graph.Node) *graph.Node
	early, undo func(*graph.Node) *graph.Node
}

// markRedecode records n's mark.
func markRedecode(n *graph.Node, m *mark) { redecodes.Store(n, m) }

// forgetRedecode drops n's mark once its graph is built.
func forgetRedecode(n *graph.Node) { redecodes.Delete(n) }

// lastEarly maps a graph to the bfloat16 gradient its backward rounded
// last (earlyGradient), which the next fresh decode waits for.
var lastEarly sync.Map

// first returns element 0 of x as an int32 scalar: a value any later
// computation can be made to wait for (see decodeFP8).
func first(x *graph.Node) *graph.Node {
	one := graph.Slice(graph.Reshape(x, x.Shape().Size()), graph.AxisRange(0, 1))
	return graph.ConvertDType(graph.Reshape(one), dtypes.Int32)
}

// fresh returns a new decode of n's values, made once v (the output
// gradient of the product that reads n) exists, and once the last early
// bfloat16 gradient of the graph exists, where n is a marked decoded
// weight or a reshape or conversion of one; otherwise n itself.
func fresh(n, v *graph.Node) *graph.Node {
	if m, ok := redecodes.Load(n); ok {
		redecoded.Add(1)
		after := first(v)
		if prev, ok := lastEarly.Load(n.Graph()); ok {
			after = graph.Min(after, first(prev.(*graph.Node)))
		}
		return m.(*mark).again(after)
	}
	in := n.Inputs()
	if len(in) != 1 {
		return n
	}
	switch n.Type() {
	case graph.NodeTypeReshape:
		if f := fresh(in[0], v); f != in[0] {
			return graph.Reshape(f, n.Shape().Dimensions...)
		}
	case graph.NodeTypeConvertDType:
		if f := fresh(in[0], v); f != in[0] {
			return graph.ConvertDType(f, n.DType())
		}
	}
	return n
}

// earlyGradient returns the gradient g of operand n of a product as
// backward goes on with it: where n is a marked weight whose gradient may
// be rounded early (GPUConfig.EarlyBF16Gradients), g rounded to bfloat16
// in distopt's layout right away and widened back (the graph's output is
// then the rounded value itself: the same bits as rounding at the end,
// without holding the float32 gradient until then), recorded so that the
// next fresh decode waits for it; otherwise g.
func earlyGradient(n, g *graph.Node) *graph.Node {
	m, ok := redecodes.Load(n)
	if !ok || m.(*mark).early == nil {
		return g
	}
	earlyGrads.Add(1)
	b := m.(*mark).early(g)
	lastEarly.Store(n.Graph(), b)
	return m.(*mark).undo(b)
}
