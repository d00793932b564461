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

// redecodes maps a decoded weight node to the function that decodes it
// again (markRedecode), while its graph is being built.
var redecodes sync.Map

// redecoded counts the fresh decodes made, for the tests.
var redecoded atomic.Int64

// markRedecode records that again(after) decodes the same values as n,
// after the scalar after exists.
func markRedecode(n *graph.Node, again func(after *graph.Node) *graph.Node) {
	redecodes.Store(n, again)
}

// forgetRedecode drops n's record once its graph is built.
func forgetRedecode(n *graph.Node) { redecodes.Delete(n) }

// first returns element 0 of x as an int32 scalar: a value any later
// computation can be made to wait for (see decodeFP8).
func first(x *graph.Node) *graph.Node {
	one := graph.Slice(graph.Reshape(x, x.Shape().Size()), graph.AxisRange(0, 1))
	return graph.ConvertDType(graph.Reshape(one), dtypes.Int32)
}

// fresh returns a new decode of n's values, made once v (the output
// gradient of the product that reads n) exists, where n is a marked
// decoded weight or a reshape or conversion of one; otherwise n itself.
func fresh(n, v *graph.Node) *graph.Node {
	if again, ok := redecodes.Load(n); ok {
		redecoded.Add(1)
		return again.(func(*graph.Node) *graph.Node)(first(v))
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
