package toy

import (
	"fmt"

	"github.com/distopt/distopt/examples/gpt/data"
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

// LM is a byte-level GPT-style language model built from GoMLX's own
// layers: token and learned position embeddings, Layers pre-norm blocks
// (layer norm, causal multi-head attention, residual; layer norm, a GELU
// MLP four times as wide, residual), a final layer norm and a Dense head to
// the 256 byte logits. It trains on token files of examples/gpt's data.
type LM struct {
	Len, Dim, Heads, Layers int
	Train, Valid            []uint16 // byte tokens (examples/gpt/data token files)
	Seed                    uint64   // the batches' sampling seed
}

// Vocab is the byte vocabulary.
const Vocab = 256

// Model returns the GoMLX model function (Task): logits [batch, Len, 256].
func (m *LM) Model() train.ModelFn {
	return func(ctx *mlctx.Context, _ any, in []*graph.Node) []*graph.Node {
		g := in[0].Graph()
		// The token embedding as a product with the one-hot bytes, not
		// layers.Embedding's gather: the gather's gradient is a scatter-add
		// with many repeated rows (a byte vocabulary), which XLA's GPU
		// compiler of jaxlib 0.10.2 to 0.11.0 emits as a compare-and-swap
		// loop (openxla/xla issue 46225). The product gives the same rows
		// (one term per row is not zero) and its gradient is a matrix
		// product (with gomlxinterop.UseDotGeneralGradient; GoMLX's own
		// gradient of products is what made the example's steps slow).
		table := ctx.In("tokens").VariableWithShape("embeddings", shapes.Make(dtypes.Float32, Vocab, m.Dim)).ValueGraph(g)
		x := graph.Einsum("btv,vd->btd", graph.OneHot(in[0], Vocab, dtypes.Float32), table)
		pos := ctx.In("positions").VariableWithShape("embeddings", shapes.Make(dtypes.Float32, m.Len, m.Dim)).ValueGraph(g)
		x = graph.Add(x, graph.InsertAxes(pos, 0))
		for l := range m.Layers {
			b := ctx.Inf("block_%d", l)
			h := layers.LayerNormalization(b.In("norm_0"), x, -1).Done()
			h = layers.MultiHeadAttention(b.In("attention"), h, h, h, m.Heads, m.Dim/m.Heads).SetOutputDim(m.Dim).UseCausalMask().Done()
			x = graph.Add(x, h)
			h = layers.LayerNormalization(b.In("norm_1"), x, -1).Done()
			h = activations.Gelu(layers.DenseWithBias(b.In("mlp_0"), h, 4*m.Dim))
			x = graph.Add(x, layers.DenseWithBias(b.In("mlp_1"), h, m.Dim))
		}
		x = layers.LayerNormalization(ctx.In("norm_f"), x, -1).Done()
		return []*graph.Node{layers.DenseWithBias(ctx.In("head"), x, Vocab)}
	}
}

// Loss is the mean cross-entropy in nats per byte (Task).
func (m *LM) Loss(labels, predictions []*graph.Node) *graph.Node {
	return losses.SparseCategoricalCrossEntropyLogits(labels, predictions)
}

// Batch returns n training sequences [n, Len] (int32) and their next
// bytes [n, Len, 1] (Task): sequence b of part at step starts at
// data.Loader's Offset of global index (step*1024+part)*n+b.
func (m *LM) Batch(step, part, n int) (x, y *tensors.Tensor) {
	return m.window(m.Train, func(b int) uint64 { return uint64((step*1024+part)*n + b) }, n)
}

// ValidBatch returns validation batch k of n sequences, drawn as Batch
// draws from the validation tokens.
func (m *LM) ValidBatch(k, n int) (x, y *tensors.Tensor) {
	return m.window(m.Valid, func(b int) uint64 { return uint64(k*n + b) }, n)
}

func (m *LM) window(tokens []uint16, index func(b int) uint64, n int) (x, y *tensors.Tensor) {
	l := data.Loader{Tokens: tokens, Seq: m.Len, Seed: m.Seed}
	xs := make([]int32, n*m.Len)
	ys := make([]int32, n*m.Len)
	for b := range n {
		off := l.Offset(index(b))
		for t := range m.Len {
			xs[b*m.Len+t] = int32(tokens[off+t])
			ys[b*m.Len+t] = int32(tokens[off+t+1])
		}
	}
	return tensors.FromFlatDataAndDimensions(xs, n, m.Len), tensors.FromFlatDataAndDimensions(ys, n, m.Len, 1)
}

// LoadLM reads dir/train.tok and dir/valid.tok (examples/gpt/prepare)
// into an LM of the given shape.
func LoadLM(dir string, seqLen, dim, heads, nLayers int) (*LM, error) {
	m := &LM{Len: seqLen, Dim: dim, Heads: heads, Layers: nLayers, Seed: 1}
	for _, f := range []struct {
		name string
		dst  *[]uint16
	}{{"train.tok", &m.Train}, {"valid.tok", &m.Valid}} {
		vocab, tok, err := data.ReadTokens(dir + "/" + f.name)
		if err != nil {
			return nil, err
		}
		if vocab != Vocab || len(tok) < seqLen+2 {
			return nil, fmt.Errorf("toy: %s/%s: vocabulary %d and %d tokens, want a byte vocabulary and more than %d tokens", dir, f.name, vocab, len(tok), seqLen+1)
		}
		*f.dst = tok
	}
	if dim%heads != 0 {
		return nil, fmt.Errorf("toy: width %d is not a multiple of %d heads", dim, heads)
	}
	return m, nil
}
