package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var gradCheckShape = Config{Layers: 2, Hidden: 8, Heads: 2, FFN: 12, Vocab: 7, Seq: 5}

// randomModel returns a model whose every weight (LayerNorm weights and
// biases included) is random, so that no gradient vanishes by symmetry.
func randomModel(t *testing.T, c Config, seed uint64) *CPU {
	t.Helper()
	m, err := NewCPU(c)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for _, p := range c.Params() {
		for i := range m.W[p.Name] {
			m.W[p.Name][i] = 0.4 * r.NormFloat64()
		}
	}
	return m
}

// TestGradientCheck compares Backward with central finite differences of
// Forward's loss for every element of every parameter of a two-layer
// model (batch 2, a sequence shorter than the context).
func TestGradientCheck(t *testing.T) {
	c := gradCheckShape
	m := randomModel(t, c, 3)
	const batch, seq = 2, 4
	r := rand.New(rand.NewPCG(9, 9))
	tokens, targets := make([]int32, batch*seq), make([]int32, batch*seq)
	for i := range tokens {
		tokens[i], targets[i] = int32(r.IntN(c.Vocab)), int32(r.IntN(c.Vocab))
	}
	loss := func() float64 {
		a, err := m.Forward(tokens, targets, batch, seq)
		if err != nil {
			t.Fatal(err)
		}
		return a.Loss
	}
	a, err := m.Forward(tokens, targets, batch, seq)
	if err != nil {
		t.Fatal(err)
	}
	grads := m.Backward(a)
	const eps = 1e-5
	for _, p := range c.Params() {
		w, g := m.W[p.Name], grads[p.Name]
		worst, norm := 0.0, 0.0
		for i := range w {
			orig := w[i]
			w[i] = orig + eps
			up := loss()
			w[i] = orig - eps
			down := loss()
			w[i] = orig
			num := (up - down) / (2 * eps)
			worst = max(worst, math.Abs(num-g[i]))
			norm = max(norm, math.Abs(num))
		}
		if norm == 0 || worst > 1e-7+1e-6*norm {
			t.Errorf("%s: largest |analytic - numeric| %.3g, largest numeric gradient %.3g", p.Name, worst, norm)
		}
	}
	// Rows of the position embedding beyond seq get no gradient.
	if g := grads["embed.positions"][seq*c.Hidden:]; slices.ContainsFunc(g, func(v float64) bool { return v != 0 }) {
		t.Error("positions past the sequence received gradient")
	}
}

// TestCausalSoftmax checks CausalSoftmax against exp(x)/Σexp(x) written
// directly (no maximum subtracted) on small scores.
func TestCausalSoftmax(t *testing.T) {
	const n, T, scale = 3, 6, 0.7
	r := rand.New(rand.NewPCG(1, 1))
	s := make([]float64, n*T*T)
	for i := range s {
		s[i] = r.NormFloat64()
	}
	p := make([]float64, len(s))
	CausalSoftmax(p, s, n, T, scale)
	for m := range n {
		for i := range T {
			sum := 0.0
			for j := 0; j <= i; j++ {
				sum += math.Exp(scale * s[(m*T+i)*T+j])
			}
			for j := range T {
				want := 0.0
				if j <= i {
					want = math.Exp(scale*s[(m*T+i)*T+j]) / sum
				}
				if got := p[(m*T+i)*T+j]; math.Abs(got-want) > 1e-15 {
					t.Fatalf("p[%d,%d,%d] = %v, want %v", m, i, j, got, want)
				}
			}
		}
	}
}

// TestCrossEntropyUniform checks that equal logits give log(v).
func TestCrossEntropyUniform(t *testing.T) {
	const rows, v = 3, 11
	logits := make([]float64, rows*v)
	for i := range logits {
		logits[i] = 2.5
	}
	got := CrossEntropy(make([]float64, rows*v), logits, []int32{0, 5, 10}, rows, v)
	if math.Abs(got-math.Log(v)) > 1e-14 {
		t.Fatalf("loss %v, want log(%d) = %v", got, v, math.Log(v))
	}
}

// TestParams checks the parameter count of the presets against the closed
// form: per layer 12h² + 13h (QKV, projection, MLP with FFN = 4h; their
// biases; two LayerNorms), embeddings (vocab + seq)·h, the final LayerNorm.
func TestParams(t *testing.T) {
	for _, name := range []string{"small", "1.3b"} {
		c, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		h := int64(c.Hidden)
		want := int64(c.Layers)*(12*h*h+13*h) + int64(c.Vocab+c.Seq)*h + 2*h
		if got := c.NumParams(); got != want {
			t.Errorf("%s: %d parameters, want %d", name, got, want)
		}
		for _, p := range c.Params() {
			if p.HighPrecision != (len(p.Shape) == 1 || p.Name == "embed.tokens" || p.Name == "embed.positions") || p.NoDecay != (len(p.Shape) == 1) {
				t.Errorf("%s: %s shape %v high precision %v, no decay %v", name, p.Name, p.Shape, p.HighPrecision, p.NoDecay)
			}
		}
	}
	if _, err := Preset("huge"); err == nil {
		t.Error("Preset accepted an unknown name")
	}
	if err := (Config{Layers: 1, Hidden: 10, Heads: 3, FFN: 4, Vocab: 5, Seq: 2}).Validate(); err == nil {
		t.Error("Validate accepted hidden 10 with 3 heads")
	}
}

// TestTrainingReducesLoss takes plain gradient steps on one batch of the
// tiny shape and checks that the loss falls well below its start: the
// model can fit data through its own gradients.
func TestTrainingReducesLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := Config{Layers: 1, Hidden: 16, Heads: 2, FFN: 32, Vocab: 13, Seq: 8}
	m, err := NewCPU(c)
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int32, 2*8)
	targets := make([]int32, len(tokens))
	for i := range tokens {
		tokens[i], targets[i] = int32(i%c.Vocab), int32((i*5+1)%c.Vocab)
	}
	var first, last float64
	for step := range 200 {
		a, err := m.Forward(tokens, targets, 2, 8)
		if err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			first = a.Loss
		}
		last = a.Loss
		for name, g := range m.Backward(a) {
			for i := range g {
				m.W[name][i] -= 0.5 * g[i]
			}
		}
	}
	if !(last < first/4) {
		t.Fatalf("loss went from %v to %v in 200 steps, want below a quarter", first, last)
	}
}
