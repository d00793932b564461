package main

import (
	"math"
	"math/rand/v2"

	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/model"
)

// sampleTemperature divides the logits before sampling.
const sampleTemperature = 0.8

// sample extends prompt by n tokens drawn from the model's distribution
// of the next token (temperature sampleTemperature, seeded: the same text
// every run), reading at most the last Seq tokens as context.
func sample(m *model.CPU, prompt []byte, n int, seed uint64) ([]byte, error) {
	toks := data.Encode(prompt)
	if len(toks) == 0 {
		toks = []uint16{'\n'}
	}
	r := rand.New(rand.NewPCG(seed, 0x5a3))
	for range n {
		ctx := toks[max(0, len(toks)-m.Seq):]
		in := make([]int32, len(ctx))
		for i, t := range ctx {
			in[i] = int32(t)
		}
		a, err := m.Forward(in, in, 1, len(in)) // targets unused
		if err != nil {
			return nil, err
		}
		toks = append(toks, uint16(draw(a.LastLogits(), r)))
	}
	return data.Decode(toks)
}

// draw samples an index from softmax(logits / sampleTemperature).
func draw(logits []float64, r *rand.Rand) int {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = max(mx, l)
	}
	p := make([]float64, len(logits))
	sum := 0.0
	for i, l := range logits {
		p[i] = math.Exp((l - mx) / sampleTemperature)
		sum += p[i]
	}
	u := r.Float64() * sum
	for i, v := range p {
		if u < v {
			return i
		}
		u -= v
	}
	return len(p) - 1
}

// printable replaces bytes a terminal would not show by '.'.
func printable(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f) || c >= 0x80 {
			out[i] = c
		} else {
			out[i] = '.'
		}
	}
	return string(out)
}
