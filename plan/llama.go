package plan

import (
	"fmt"

	"github.com/distopt/distopt/optimizer"
)

// LlamaConfig describes a Llama-style transformer: Layers blocks of
// attention with separate Q, K, V and output projections and no biases,
// grouped-query attention when KVHeads < Heads (K and V have KVHeads heads
// of Hidden/Heads each), a SwiGLU FFN (gate, up and down projections of
// size FFN), RMSNorm weights before each of them and at the end, rotary
// positions (no position embedding), and an output head that is a
// parameter of its own unless Tied.
type LlamaConfig struct {
	Layers, Hidden, FFN, Vocab int
	Heads, KVHeads             int
	Tied                       bool
}

// Params lists the parameters under the names Hugging Face's Llama
// checkpoints use ("model.layers.<l>.self_attn.q_proj.weight", ...), so
// that an export of a model built from them loads where those checkpoints
// do. Projections and embeddings are FP8; the RMSNorm weights are
// high-precision and exempt from weight decay.
func (c LlamaConfig) Params() []optimizer.Param {
	h, f := c.Hidden, c.FFN
	kv := c.KVHeads * (h / c.Heads)
	ps := []optimizer.Param{{Name: "model.embed_tokens.weight", Shape: []int{c.Vocab, h}}}
	for l := range c.Layers {
		p := func(name string, shape []int) {
			hp := len(shape) == 1
			ps = append(ps, optimizer.Param{Name: fmt.Sprintf("model.layers.%d.%s", l, name), Shape: shape, HighPrecision: hp, NoDecay: hp})
		}
		p("input_layernorm.weight", []int{h})
		p("self_attn.q_proj.weight", []int{h, h})
		p("self_attn.k_proj.weight", []int{kv, h})
		p("self_attn.v_proj.weight", []int{kv, h})
		p("self_attn.o_proj.weight", []int{h, h})
		p("post_attention_layernorm.weight", []int{h})
		p("mlp.gate_proj.weight", []int{f, h})
		p("mlp.up_proj.weight", []int{f, h})
		p("mlp.down_proj.weight", []int{h, f})
	}
	ps = append(ps, optimizer.Param{Name: "model.norm.weight", Shape: []int{h}, HighPrecision: true, NoDecay: true})
	if !c.Tied {
		ps = append(ps, optimizer.Param{Name: "lm_head.weight", Shape: []int{c.Vocab, h}})
	}
	return ps
}

// NumParams is the number of parameter elements.
func (c LlamaConfig) NumParams() int64 { return NumParams(c.Params()) }

// Describe is a one-line description of the shape.
func (c LlamaConfig) Describe() string {
	attn := fmt.Sprintf("%d heads", c.Heads)
	if c.KVHeads < c.Heads {
		attn = fmt.Sprintf("grouped-query attention, %d heads, %d KV heads", c.Heads, c.KVHeads)
	}
	head := "untied head"
	if c.Tied {
		head = "tied embeddings"
	}
	return fmt.Sprintf("Llama-style, %d layers, hidden %d, SwiGLU FFN %d, %s, vocabulary %d, %s", c.Layers, c.Hidden, c.FFN, attn, c.Vocab, head)
}

// Validate reports a shape that cannot describe a model.
func (c LlamaConfig) Validate() error {
	switch {
	case c.Layers < 0 || c.Hidden < 1 || c.FFN < 1 || c.Vocab < 2 || c.Heads < 1 || c.KVHeads < 1:
		return fmt.Errorf("plan: Llama shape %+v: sizes must be positive (vocabulary at least 2)", c)
	case c.Hidden%c.Heads != 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("plan: Llama shape %+v: heads must divide hidden, and KV heads the heads", c)
	}
	return nil
}
