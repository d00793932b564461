package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distopt/distopt/optimizer"
)

// Config is the shape of the model.
type Config struct {
	Layers, Hidden, Heads, FFN int
	// Vocab is the vocabulary size, Seq the context length (rows of the
	// position embedding).
	Vocab, Seq int
}

// Presets are the named shapes: "small" is GPT-2 small's shape (124M
// parameters with GPT-2's vocabulary; here with the byte-level vocabulary
// of examples/gpt/data), "1.3b" is examples/multigpu's (plan.GPT13B: the
// GPT-3 XL shape) with 16 heads of 128, "tiny" a shape for tests and smoke
// runs, with one head of 64 (a width the GPU model's fused attention
// takes).
var Presets = map[string]Config{
	"tiny":  {Layers: 2, Hidden: 64, Heads: 1, FFN: 256, Vocab: 256, Seq: 64},
	"small": {Layers: 12, Hidden: 768, Heads: 12, FFN: 3072, Vocab: 256, Seq: 1024},
	"1.3b":  {Layers: 24, Hidden: 2048, Heads: 16, FFN: 8192, Vocab: 256, Seq: 2048},
}

// Preset returns the named preset or an error listing the names.
func Preset(name string) (Config, error) {
	c, ok := Presets[name]
	if !ok {
		names := make([]string, 0, len(Presets))
		for n := range Presets {
			names = append(names, n)
		}
		slices.Sort(names)
		return c, fmt.Errorf("model: no preset %q (have %s)", name, strings.Join(names, ", "))
	}
	return c, nil
}

// Validate reports a shape the model cannot take.
func (c Config) Validate() error {
	switch {
	case c.Layers < 1 || c.Hidden < 1 || c.Heads < 1 || c.FFN < 1 || c.Vocab < 2 || c.Seq < 1:
		return fmt.Errorf("model: shape %+v: sizes must be positive (vocabulary at least 2)", c)
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("model: hidden %d is not a multiple of heads %d", c.Hidden, c.Heads)
	}
	return nil
}

// HeadDim is the width of one attention head.
func (c Config) HeadDim() int { return c.Hidden / c.Heads }

// Params lists the parameters in the order the forward pass uses them
// (the order the optimizer's overlap wants): token and position
// embeddings, then per layer "layer<l>." ln1.weight, ln1.bias,
// attn.qkv.weight [3H, H], attn.qkv.bias, attn.proj.weight [H, H],
// attn.proj.bias, ln2.weight, ln2.bias, mlp.fc.weight [F, H], mlp.fc.bias,
// mlp.proj.weight [H, F], mlp.proj.bias; then final_ln.weight and
// final_ln.bias. The output head is tied to embed.tokens.
func (c Config) Params() []optimizer.Param {
	h, f := c.Hidden, c.FFN
	ps := []optimizer.Param{
		{Name: "embed.tokens", Shape: []int{c.Vocab, h}, HighPrecision: true},
		{Name: "embed.positions", Shape: []int{c.Seq, h}, HighPrecision: true},
	}
	vec := func(name string, n int) optimizer.Param {
		return optimizer.Param{Name: name, Shape: []int{n}, HighPrecision: true, NoDecay: true}
	}
	for l := range c.Layers {
		p := fmt.Sprintf("layer%d.", l)
		ps = append(ps,
			vec(p+"ln1.weight", h), vec(p+"ln1.bias", h),
			optimizer.Param{Name: p + "attn.qkv.weight", Shape: []int{3 * h, h}}, vec(p+"attn.qkv.bias", 3*h),
			optimizer.Param{Name: p + "attn.proj.weight", Shape: []int{h, h}}, vec(p+"attn.proj.bias", h),
			vec(p+"ln2.weight", h), vec(p+"ln2.bias", h),
			optimizer.Param{Name: p + "mlp.fc.weight", Shape: []int{f, h}}, vec(p+"mlp.fc.bias", f),
			optimizer.Param{Name: p + "mlp.proj.weight", Shape: []int{h, f}}, vec(p+"mlp.proj.bias", h),
		)
	}
	return append(ps, vec("final_ln.weight", h), vec("final_ln.bias", h))
}

// NumParams is the number of parameter elements.
func (c Config) NumParams() int64 {
	var n int64
	for _, p := range c.Params() {
		k := int64(1)
		for _, d := range p.Shape {
			k *= int64(d)
		}
		n += k
	}
	return n
}

// FlopsPerToken is the training FLOPs per token (forward and backward):
// 6 x the matrix parameters (linear layers and the head) plus the
// attention scores and their product with the values, 12 x Layers x Hidden
// x Seq (PaLM's accounting, with the full causal square counted as in
// nanoGPT's MFU).
func (c Config) FlopsPerToken() float64 {
	h, f := float64(c.Hidden), float64(c.FFN)
	matrices := float64(c.Layers)*(4*h*h+2*h*f) + float64(c.Vocab)*h
	return 6*matrices + 12*float64(c.Layers)*h*float64(c.Seq)
}
