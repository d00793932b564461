package plan

import (
	"flag"
	"fmt"

	"github.com/distopt/distopt/optimizer"
)

// GPTConfig describes a GPT-like transformer (GPT-2, GPT-3): Layers blocks
// of attention (fused QKV and output projections) and an MLP, with
// LayerNorms and biases, learned token and position embeddings, and an
// output head that is a parameter of its own unless Tied.
type GPTConfig struct {
	Layers, Hidden, FFN, Vocab, Positions int
	// Tied shares the output head with the token embedding (GPT-2): no
	// head.weight parameter. Omitted from JSON when false, so that the
	// untied shape encodes as before.
	Tied bool `json:",omitempty"`
}

// GPT13B is a GPT-like model of about 1.3 billion parameters (the GPT-3 XL
// shape: 24 layers, hidden 2048, FFN 8192, vocabulary 50304) with an
// untied head.
var GPT13B = GPTConfig{Layers: 24, Hidden: 2048, FFN: 8192, Vocab: 50304, Positions: 2048}

// Params lists the model's parameters: matrices and embeddings in FP8,
// norms and biases marked high-precision and exempt from weight decay.
// Names are "embed.tokens", "embed.positions", "layer<l>.<part>",
// "final_ln.weight", "final_ln.bias" and "head.weight".
func (c GPTConfig) Params() []optimizer.Param {
	h, f := c.Hidden, c.FFN
	ps := []optimizer.Param{
		{Name: "embed.tokens", Shape: []int{c.Vocab, h}},
		{Name: "embed.positions", Shape: []int{c.Positions, h}},
	}
	for l := range c.Layers {
		p := func(name string, shape []int, hp bool) {
			ps = append(ps, optimizer.Param{Name: fmt.Sprintf("layer%d.%s", l, name), Shape: shape, HighPrecision: hp, NoDecay: hp})
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
		optimizer.Param{Name: "final_ln.weight", Shape: []int{h}, HighPrecision: true, NoDecay: true},
		optimizer.Param{Name: "final_ln.bias", Shape: []int{h}, HighPrecision: true, NoDecay: true},
	)
	if !c.Tied {
		ps = append(ps, optimizer.Param{Name: "head.weight", Shape: []int{c.Vocab, h}})
	}
	return ps
}

// NumParams is the number of parameter elements.
func (c GPTConfig) NumParams() int64 { return NumParams(c.Params()) }

// Describe is a one-line description of the shape.
func (c GPTConfig) Describe() string {
	head := "untied head"
	if c.Tied {
		head = "head tied to the token embedding"
	}
	return fmt.Sprintf("GPT-like, %d layers, hidden %d, FFN %d, vocabulary %d, %d positions, %s", c.Layers, c.Hidden, c.FFN, c.Vocab, c.Positions, head)
}

// Validate reports a shape that cannot describe a model.
func (c GPTConfig) Validate() error {
	if c.Layers < 0 || c.Hidden < 1 || c.FFN < 1 || c.Vocab < 2 || c.Positions < 1 {
		return fmt.Errorf("plan: GPT shape %+v: sizes must be positive (vocabulary at least 2)", c)
	}
	return nil
}

// RegisterFlags defines -layers, -hidden, -ffn, -vocab and -positions on
// fs, setting c's fields, with c's current values as defaults (Tied has no
// flag here: examples/multigpu's gradient model has an untied head).
func (c *GPTConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Layers, "layers", c.Layers, "transformer blocks of the GPT-like model")
	fs.IntVar(&c.Hidden, "hidden", c.Hidden, "hidden size")
	fs.IntVar(&c.FFN, "ffn", c.FFN, "FFN (MLP) size")
	fs.IntVar(&c.Vocab, "vocab", c.Vocab, "vocabulary size")
	fs.IntVar(&c.Positions, "positions", c.Positions, "positions (context length)")
}

// NumParams is the number of elements of params.
func NumParams(params []optimizer.Param) int64 {
	var n int64
	for _, p := range params {
		k := int64(1)
		for _, s := range p.Shape {
			k *= int64(s)
		}
		n += k
	}
	return n
}
