package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

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

// printable returns the generated text b as it is safe to print on a
// terminal: printable runes, newlines and tabs as they are; a backslash
// doubled; every other rune escaped as strconv.QuoteRune writes it inside
// its quotes (\a, \x1b, \u200b); and each byte of invalid UTF-8 as \xNN.
// So no control sequence reaches the terminal, and the escapes read back
// unambiguously.
func printable(b []byte) string {
	var out strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&out, `\x%02x`, b[0])
		case r == '\\':
			out.WriteString(`\\`)
		case r == '\n' || r == '\t' || unicode.IsPrint(r):
			out.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			out.WriteString(q[1 : len(q)-1])
		}
		b = b[n:]
	}
	return out.String()
}
