package gomlxinterop

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/distopt/distopt/shard"
)

// bucketGradients lays the gradients out as distopt's buckets (layout l):
// one flat output per bucket, each parameter's gradient (grads[i] is
// params[i]'s, already in distopt's layout and gradient type) at its place,
// zeros in the padding between parameters and after the last. The step
// reads these outputs in place (optimizer.BindGrads), so distopt keeps no
// gradient buffer of its own. It panics (GoMLX turns the panic into the
// error of Exec) if the layout and the parameters disagree.
func bucketGradients(l *shard.Layout, params []Param, grads []*graph.Node) []*graph.Node {
	at := make(map[int]int, len(params)) // layout index -> gradient
	for i, p := range params {
		li := l.Index(p.Name)
		if li < 0 {
			panic(fmt.Errorf("%w: parameter %q is not in distopt's layout", ErrHandOver, p.Name))
		}
		at[li] = i
	}
	g, dt := grads[0].Graph(), grads[0].DType()
	zeros := func(n int) *graph.Node { return graph.Zeros(g, shapes.Make(dt, n)) }
	out := make([]*graph.Node, len(l.Buckets))
	for b, bk := range l.Buckets {
		var parts []*graph.Node
		prev := 0
		for _, li := range bk.Params {
			i, ok := at[li]
			if !ok {
				panic(fmt.Errorf("%w: distopt's parameter %q has no gradient in the graph", ErrHandOver, l.Params[li].Name))
			}
			pl := l.Places[li]
			if pl.Offset > prev {
				parts = append(parts, zeros(pl.Offset-prev))
			}
			if n := grads[i].Shape().Size(); n != pl.Len {
				panic(fmt.Errorf("%w: the gradient of %q has %d elements, distopt's place %d", ErrHandOver, params[i].Name, n, pl.Len))
			}
			parts = append(parts, graph.Reshape(grads[i], pl.Len))
			prev = pl.Offset + pl.Len
		}
		if bk.Size > prev {
			parts = append(parts, zeros(bk.Size-prev))
		}
		out[b] = parts[0]
		if len(parts) > 1 {
			out[b] = graph.Concatenate(parts, 0)
		}
	}
	return out
}
