package optimizer

import (
	"flag"
	"fmt"
)

// GPTConfig describes a GPT-like transformer for memory planning and
// benchmarks: Layers blocks of attention (QKV and output projections) and an
// MLP, with LayerNorms and biases, token and position embeddings, and an
// untied output head.
type GPTConfig struct {
	Layers, Hidden, FFN, Vocab, Positions int
}

// GPT13B is a GPT-like model of about 1.3 billion parameters (the GPT-3 XL
// shape: 24 layers, hidden 2048, FFN 8192, vocabulary 50304).
var GPT13B = GPTConfig{Layers: 24, Hidden: 2048, FFN: 8192, Vocab: 50304, Positions: 2048}

// Params lists the model's parameters: matrices in FP8, norms and biases
// marked high-precision and exempt from weight decay.
func (c GPTConfig) Params() []Param {
	h, f := c.Hidden, c.FFN
	ps := []Param{
		{Name: "embed.tokens", Shape: []int{c.Vocab, h}},
		{Name: "embed.positions", Shape: []int{c.Positions, h}},
	}
	for l := range c.Layers {
		p := func(name string, shape []int, hp bool) {
			ps = append(ps, Param{Name: fmt.Sprintf("layer%d.%s", l, name), Shape: shape, HighPrecision: hp, NoDecay: hp})
		}
		p("ln1.weight", []int{h}, true)
		p("ln1.bias", []int{h}, true)
		p("attn.qkv.weight", []int{3 * h, h}, false)
		p("attn.qkv.bias", []int{3 * h}, true)
		p("attn.out.weight", []int{h, h}, false)
		p("attn.out.bias", []int{h}, true)
		p("ln2.weight", []int{h}, true)
		p("ln2.bias", []int{h}, true)
		p("mlp.up.weight", []int{f, h}, false)
		p("mlp.up.bias", []int{f}, true)
		p("mlp.down.weight", []int{h, f}, false)
		p("mlp.down.bias", []int{h}, true)
	}
	ps = append(ps,
		Param{Name: "final_ln.weight", Shape: []int{h}, HighPrecision: true, NoDecay: true},
		Param{Name: "final_ln.bias", Shape: []int{h}, HighPrecision: true, NoDecay: true},
		Param{Name: "head.weight", Shape: []int{c.Vocab, h}},
	)
	return ps
}

// NumParams is the number of parameter elements.
func (c GPTConfig) NumParams() int64 {
	var n int64
	for _, p := range c.Params() {
		k := int64(1)
		for _, s := range p.Shape {
			k *= int64(s)
		}
		n += k
	}
	return n
}

// RegisterFlags defines -layers, -hidden, -ffn, -vocab and -positions on fs,
// setting c's fields, with c's current values as defaults.
func (c *GPTConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Layers, "layers", c.Layers, "transformer blocks of the GPT-like model")
	fs.IntVar(&c.Hidden, "hidden", c.Hidden, "hidden size")
	fs.IntVar(&c.FFN, "ffn", c.FFN, "FFN (MLP) size")
	fs.IntVar(&c.Vocab, "vocab", c.Vocab, "vocabulary size")
	fs.IntVar(&c.Positions, "positions", c.Positions, "positions (context length)")
}
