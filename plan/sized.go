package plan

import (
	"fmt"

	"github.com/distopt/distopt/optimizer"
)

// SizedModel is a Llama-like shape sized to a parameter count: what
// `distopt plan -params N` plans for. Its tensors are those of a real model
// of about N parameters, so buckets, padding and the gradient pool come out
// as they would for one; Rest elements of one more high-precision tensor
// make the count exact.
type SizedModel struct {
	Llama LlamaConfig
	Rest  int   // elements of the "rest" tensor, fewer than 2 x Hidden
	Count int64 // the count asked for: Llama's parameters plus Rest
}

// FlatModel is one FP8 tensor of N elements: ForCount's model of a count
// too small for any Llama-like shape.
type FlatModel struct{ N int64 }

// sizedVocab is the vocabulary of the shapes ForCount builds (Llama 2's).
const sizedVocab = 32000

// sizedHeadDim is the attention head size of those shapes.
const sizedHeadDim = 128

// ForCount returns a model of exactly n parameters: a SizedModel, or for n
// below the smallest such shape (about 8.4 million) a FlatModel. The shape
// follows Llama 3: heads of 128, up to 8 KV heads, a SwiGLU FFN of 3.5 x hidden
// rounded up to 256, an untied head over a vocabulary of 32000 tokens or
// more. The hidden size is the largest multiple of 128 (of 512 from 2048
// on) whose model of hidden/128 layers fits n; then as many layers as fit,
// and the rest goes to the vocabulary and a small tensor.
func ForCount(n int64) Model {
	shape := func(h int) LlamaConfig {
		heads := h / sizedHeadDim
		return LlamaConfig{Layers: max(1, heads), Hidden: h, FFN: (7*h/2 + 255) / 256 * 256, Vocab: sizedVocab, Heads: heads, KVHeads: gcd(heads, 8)}
	}
	c := shape(sizedHeadDim)
	if llamaCount(c) > n {
		return FlatModel{N: n}
	}
	for h := 2 * sizedHeadDim; ; h += sizedStep(h) {
		next := shape(h)
		if llamaCount(next) > n {
			break
		}
		c = next
	}
	c.Layers = 0
	base := llamaCount(c)
	c.Layers = 1
	perLayer := llamaCount(c) - base
	c.Layers = int((n - base) / perLayer)
	c.Vocab += int((n - llamaCount(c)) / int64(2*c.Hidden))
	return SizedModel{Llama: c, Rest: int(n - llamaCount(c)), Count: n}
}

// sizedStep is the step from hidden size h to the next that ForCount
// tries: one head below 16 heads, then 4.
func sizedStep(h int) int {
	if h < 16*sizedHeadDim {
		return sizedHeadDim
	}
	return 4 * sizedHeadDim
}

// gcd is the greatest common divisor of a and b.
func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// llamaCount is the number of parameters of c in closed form: embeddings,
// the final norm, and per layer two norms, Q and O, K and V, and the FFN.
func llamaCount(c LlamaConfig) int64 {
	h, f, kv := int64(c.Hidden), int64(c.FFN), int64(c.KVHeads*(c.Hidden/c.Heads))
	emb := 2 * int64(c.Vocab) * h
	if c.Tied {
		emb /= 2
	}
	return emb + h + int64(c.Layers)*(2*h+2*h*h+2*kv*h+3*h*f)
}

// Params lists the Llama shape's parameters and the rest tensor.
func (m SizedModel) Params() []optimizer.Param {
	ps := m.Llama.Params()
	if m.Rest > 0 {
		ps = append(ps, optimizer.Param{Name: "rest", Shape: []int{m.Rest}, HighPrecision: true, NoDecay: true})
	}
	return ps
}

// NumParams is the count the model was sized to.
func (m SizedModel) NumParams() int64 { return NumParams(m.Params()) }

// Describe names the count and the shape that models it.
func (m SizedModel) Describe() string {
	s := fmt.Sprintf("%d parameters as a %s", m.Count, m.Llama.Describe())
	if m.Rest > 0 {
		s += fmt.Sprintf(", and %d elements more in high precision", m.Rest)
	}
	return s
}

// Validate reports a shape that does not add up to the count.
func (m SizedModel) Validate() error {
	if err := m.Llama.Validate(); err != nil {
		return err
	}
	if m.Rest < 0 || m.NumParams() != m.Count {
		return fmt.Errorf("plan: sized model of %d parameters has %d", m.Count, m.NumParams())
	}
	return nil
}

// Params is the one tensor.
func (m FlatModel) Params() []optimizer.Param {
	return []optimizer.Param{{Name: "params", Shape: []int{int(m.N)}}}
}

// NumParams is N.
func (m FlatModel) NumParams() int64 { return m.N }

// Describe names the tensor.
func (m FlatModel) Describe() string { return fmt.Sprintf("one FP8 tensor of %d elements", m.N) }

// Validate reports a count that is not positive.
func (m FlatModel) Validate() error {
	if m.N < 1 {
		return fmt.Errorf("plan: flat model of %d elements", m.N)
	}
	return nil
}
