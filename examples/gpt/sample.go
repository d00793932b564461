package main

import (
	"math"
	"math/rand/v2"

	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/model"
)

// sampleTemperature divides the logits before sampling.
const sampleTemperature = 0.8

// nextLogits returns the model's logits of the token after context (at
// most the model's Seq tokens, at least one).
type nextLogits func(context []int32) ([]float64, error)

// generate extends prompt by n tokens drawn from the distribution next
// gives (temperature sampleTemperature, seeded: the same text every run),
// reading at most the last seq tokens as context. Both training paths
// sample through it: the CPU one with cpuNext, the GPU one with
// gpuNext.
func generate(next nextLogits, prompt []byte, n, seq int, seed uint64) ([]byte, error) {
	toks := data.Encode(prompt)
	if len(toks) == 0 {
		toks = []uint16{'\n'}
	}
	r := rand.New(rand.NewPCG(seed, 0x5a3))
	for range n {
		ctx := toks[max(0, len(toks)-seq):]
		in := make([]int32, len(ctx))
		for i, t := range ctx {
			in[i] = int32(t)
		}
		logits, err := next(in)
		if err != nil {
			return nil, err
		}
		toks = append(toks, uint16(draw(logits, r)))
	}
	return data.Decode(toks)
}

// cpuNext runs the float64 model on the context alone.
func cpuNext(m *model.CPU) nextLogits {
	return func(in []int32) ([]float64, error) {
		a, err := m.Forward(in, in, 1, len(in)) // targets unused
		if err != nil {
			return nil, err
		}
		return a.LastLogits(), nil
	}
}

// sample extends prompt by n tokens of the float64 model.
func sample(m *model.CPU, prompt []byte, n int, seed uint64) ([]byte, error) {
	return generate(cpuNext(m), prompt, n, m.Seq, seed)
}

// packContext writes context (1 to seq tokens) at the start of row 0 of
// the batch in (batch x seq tokens), every other token 0, and returns
// the index of the row of logits that predicts the next token: the
// context's last position. The causal mask keeps the padding after it
// and the other rows out of that row's logits.
func packContext(in, context []int32) int {
	clear(in)
	copy(in, context)
	return len(context) - 1
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
