package toy

import (
	"math/rand/v2"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
)

// Transformer is a one-block transformer encoder learning to reverse a
// sequence of tokens: token and position embeddings, multi-head
// self-attention and a ReLU feed-forward layer, each with a residual
// connection and a layer norm, and a Dense layer to the vocabulary's
// logits.
type Transformer struct {
	Vocab, Len, Dim, Heads, FFN int
}

// Tiny is the transformer of the tests and the example.
var Tiny = Transformer{Vocab: 16, Len: 8, Dim: 32, Heads: 4, FFN: 64}

// Model returns the GoMLX model function (Task).
func (m Transformer) Model() train.ModelFn {
	return func(ctx *mlctx.Context, _ any, in []*graph.Node) []*graph.Node {
		g := in[0].Graph()
		x := layers.Embedding(ctx.In("tokens"), in[0], dtypes.Float32, m.Vocab, m.Dim)
		pos := ctx.In("positions").VariableWithShape("embeddings", shapes.Make(dtypes.Float32, m.Len, m.Dim)).ValueGraph(g)
		x = graph.Add(x, graph.InsertAxes(pos, 0))
		att := layers.MultiHeadAttention(ctx.In("attention"), x, x, x, m.Heads, m.Dim/m.Heads).SetOutputDim(m.Dim).Done()
		x = layers.LayerNormalization(ctx.In("norm_0"), graph.Add(x, att), -1).Done()
		h := activations.Relu(layers.DenseWithBias(ctx.In("ffn_0"), x, m.FFN))
		x = layers.LayerNormalization(ctx.In("norm_1"), graph.Add(x, layers.DenseWithBias(ctx.In("ffn_1"), h, m.Dim)), -1).Done()
		return []*graph.Node{layers.DenseWithBias(ctx.In("logits"), x, m.Vocab)}
	}
}

// Loss is the cross-entropy of the logits against the reversed tokens
// (Task).
func (m Transformer) Loss(labels, predictions []*graph.Node) *graph.Node {
	return losses.SparseCategoricalCrossEntropyLogits(labels, predictions)
}

// Batch returns n random sequences [n, Len] (int32) and their reversals
// [n, Len, 1] (Task).
func (m Transformer) Batch(step, part, n int) (x, y *tensors.Tensor) {
	r := rand.New(rand.NewPCG(uint64(step), uint64(part)))
	xs := make([]int32, n*m.Len)
	ys := make([]int32, n*m.Len)
	for b := range n {
		for i := range m.Len {
			xs[b*m.Len+i] = int32(r.IntN(m.Vocab))
		}
		for i := range m.Len {
			ys[b*m.Len+i] = xs[b*m.Len+m.Len-1-i]
		}
	}
	return tensors.FromFlatDataAndDimensions(xs, n, m.Len), tensors.FromFlatDataAndDimensions(ys, n, m.Len, 1)
}
