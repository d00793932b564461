package model

import (
	"fmt"
	"strconv"
)

// CPU is the float64 reference of the whole model: weights by parameter
// name (flattened row-major, as Config.Params lists them).
type CPU struct {
	Config
	W map[string][]float64
	// BF16 rounds the two linear outputs the GPU model
	// (examples/gpt/gpumodel) keeps in bfloat16, qkv and fc, after their
	// bias (RoundBF16), so that the reference rounds where the GPU does:
	// attention, GELU and their gradients then read the rounded values.
	// Off: everything stays float64.
	BF16 bool
	// HeadBF16 rounds the output head where PyTorch's BF16 autocast does
	// (RoundBF16; examples/gpt -head-precision bf16, gpumodel.HeadBF16):
	// in Forward the head's input (the final LayerNorm's output) and its
	// logits, from which the cross-entropy is computed; in Backward the
	// logits' gradient before the head's two products, and their results:
	// the input gradient, and the head's part of the token embedding's
	// gradient on its own before the embedding's part joins it. Off:
	// float64.
	HeadBF16 bool
}

// NewCPU returns the model with the initial values of Config.Init.
func NewCPU(c Config) (*CPU, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &CPU{Config: c, W: map[string][]float64{}}
	init := c.Init()
	for _, p := range c.Params() {
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		f := make([]float32, n)
		if err := init(p.Name, 0, f); err != nil {
			return nil, err
		}
		w := make([]float64, n)
		for i, v := range f {
			w[i] = float64(v)
		}
		m.W[p.Name] = w
	}
	return m, nil
}

// block holds one layer's activations.
type block struct {
	x, ln1, mean1, rstd1, qkv, probs, att []float64
	x2, ln2, mean2, rstd2, fc, gelu       []float64
}

// Activations are what Forward keeps for Backward.
type Activations struct {
	batch, seq            int
	tokens, targets       []int32
	blocks                []block
	xf, lnf, meanf, rstdf []float64
	logits, probs         []float64
	Loss                  float64
}

func (m *CPU) w(layer int, name string) []float64 {
	if layer < 0 {
		return m.W[name]
	}
	return m.W["layer"+strconv.Itoa(layer)+"."+name]
}

// Forward runs the model on tokens [batch, seq] and returns the mean
// cross-entropy against targets with the activations.
func (m *CPU) Forward(tokens, targets []int32, batch, seq int) (*Activations, error) {
	if seq > m.Seq || len(tokens) != batch*seq || len(targets) != batch*seq {
		return nil, fmt.Errorf("model: %d tokens and %d targets for batch %d x seq %d (context %d)", len(tokens), len(targets), batch, seq, m.Seq)
	}
	h, f, n := m.Hidden, m.FFN, batch*seq
	a := &Activations{batch: batch, seq: seq, tokens: tokens, targets: targets}
	x := make([]float64, n*h)
	Embed(x, m.W["embed.tokens"], m.W["embed.positions"], tokens, batch, seq, h)
	for l := range m.Layers {
		k := block{x: x, ln1: make([]float64, n*h), mean1: make([]float64, n), rstd1: make([]float64, n),
			qkv: make([]float64, n*3*h), probs: make([]float64, batch*m.Heads*seq*seq), att: make([]float64, n*h),
			x2: make([]float64, n*h), ln2: make([]float64, n*h), mean2: make([]float64, n), rstd2: make([]float64, n),
			fc: make([]float64, n*f), gelu: make([]float64, n*f)}
		LayerNorm(k.ln1, k.mean1, k.rstd1, x, m.w(l, "ln1.weight"), m.w(l, "ln1.bias"), n, h)
		Linear(k.qkv, k.ln1, m.w(l, "attn.qkv.weight"), m.w(l, "attn.qkv.bias"), n, h, 3*h)
		m.round(k.qkv)
		Attention(k.att, k.probs, k.qkv, batch, seq, h, m.Heads)
		Linear(k.x2, k.att, m.w(l, "attn.proj.weight"), m.w(l, "attn.proj.bias"), n, h, h)
		for i := range k.x2 {
			k.x2[i] += x[i]
		}
		LayerNorm(k.ln2, k.mean2, k.rstd2, k.x2, m.w(l, "ln2.weight"), m.w(l, "ln2.bias"), n, h)
		Linear(k.fc, k.ln2, m.w(l, "mlp.fc.weight"), m.w(l, "mlp.fc.bias"), n, h, f)
		m.round(k.fc)
		GELU(k.gelu, k.fc)
		x = make([]float64, n*h)
		Linear(x, k.gelu, m.w(l, "mlp.proj.weight"), m.w(l, "mlp.proj.bias"), n, f, h)
		for i := range x {
			x[i] += k.x2[i]
		}
		a.blocks = append(a.blocks, k)
	}
	a.xf, a.lnf, a.meanf, a.rstdf = x, make([]float64, n*h), make([]float64, n), make([]float64, n)
	LayerNorm(a.lnf, a.meanf, a.rstdf, x, m.W["final_ln.weight"], m.W["final_ln.bias"], n, h)
	m.roundHead(a.lnf)
	a.logits = make([]float64, n*m.Vocab)
	Linear(a.logits, a.lnf, m.W["embed.tokens"], nil, n, h, m.Vocab)
	m.roundHead(a.logits)
	a.probs = make([]float64, n*m.Vocab)
	a.Loss = CrossEntropy(a.probs, a.logits, targets, n, m.Vocab)
	return a, nil
}

// round applies RoundBF16 to x when m.BF16 is set.
func (m *CPU) round(x []float64) {
	if m.BF16 {
		RoundBF16(x)
	}
}

// roundHead applies RoundBF16 to x when m.HeadBF16 is set.
func (m *CPU) roundHead(x []float64) {
	if m.HeadBF16 {
		RoundBF16(x)
	}
}

// Backward returns the gradient of a.Loss with respect to every weight.
func (m *CPU) Backward(a *Activations) map[string][]float64 {
	g := map[string][]float64{}
	for name, w := range m.W {
		g[name] = make([]float64, len(w))
	}
	gw := func(l int, name string) []float64 { return g["layer"+strconv.Itoa(l)+"."+name] }
	h, f, n := m.Hidden, m.FFN, a.batch*a.seq
	dlogits := make([]float64, n*m.Vocab)
	CrossEntropyBackward(dlogits, a.probs, a.targets, n, m.Vocab, 1)
	m.roundHead(dlogits)
	dln := make([]float64, n*h)
	LinearBackward(dln, g["embed.tokens"], nil, dlogits, a.lnf, m.W["embed.tokens"], n, h, m.Vocab)
	m.roundHead(dln)
	m.roundHead(g["embed.tokens"]) // the head's part alone so far: EmbedBackward adds the rest
	dx := make([]float64, n*h)
	LayerNormBackward(dx, g["final_ln.weight"], g["final_ln.bias"], dln, a.xf, a.meanf, a.rstdf, m.W["final_ln.weight"], n, h)
	for l := m.Layers - 1; l >= 0; l-- {
		k := a.blocks[l]
		// dx is the gradient of the block's output, x2 + MLP(LN2(x2)).
		dgelu, dfc := make([]float64, n*f), make([]float64, n*f)
		LinearBackward(dgelu, gw(l, "mlp.proj.weight"), gw(l, "mlp.proj.bias"), dx, k.gelu, m.w(l, "mlp.proj.weight"), n, f, h)
		GELUBackward(dfc, dgelu, k.fc)
		clear(dln)
		LinearBackward(dln, gw(l, "mlp.fc.weight"), gw(l, "mlp.fc.bias"), dfc, k.ln2, m.w(l, "mlp.fc.weight"), n, h, f)
		LayerNormBackward(dx, gw(l, "ln2.weight"), gw(l, "ln2.bias"), dln, k.x2, k.mean2, k.rstd2, m.w(l, "ln2.weight"), n, h)
		// dx is now the gradient of x2 = x + Attn(LN1(x)).
		datt, dqkv := make([]float64, n*h), make([]float64, n*3*h)
		LinearBackward(datt, gw(l, "attn.proj.weight"), gw(l, "attn.proj.bias"), dx, k.att, m.w(l, "attn.proj.weight"), n, h, h)
		AttentionBackward(dqkv, datt, k.probs, k.qkv, a.batch, a.seq, h, m.Heads)
		clear(dln)
		LinearBackward(dln, gw(l, "attn.qkv.weight"), gw(l, "attn.qkv.bias"), dqkv, k.ln1, m.w(l, "attn.qkv.weight"), n, h, 3*h)
		LayerNormBackward(dx, gw(l, "ln1.weight"), gw(l, "ln1.bias"), dln, k.x, k.mean1, k.rstd1, m.w(l, "ln1.weight"), n, h)
	}
	EmbedBackward(g["embed.tokens"], g["embed.positions"], dx, a.tokens, a.batch, a.seq, h)
	return g
}

// LastLogits returns the logits of the last position of the last sequence.
func (a *Activations) LastLogits() []float64 {
	v := len(a.logits) / (a.batch * a.seq)
	return a.logits[len(a.logits)-v:]
}
