package model

import (
	"math"
	"slices"
	"testing"

	"github.com/distopt/distopt/bf16"
)

// TestRoundBF16 checks RoundBF16 on ties and on a value that rounds
// differently through float32 (as the GPU computes) than directly: 1 +
// 2^-8 + 2^-40 becomes 1 + 2^-8 in float32, a tie that goes to the even
// 1.0, where rounding the float64 directly would give 1 + 2^-7.
func TestRoundBF16(t *testing.T) {
	x := []float64{1, 1 + 0x1p-8, 1 + 3*0x1p-8, 1 + 0x1p-8 + 0x1p-40, -3.0e38, 0x1p-130, math.Inf(-1)}
	want := []float64{1, 1, 1 + 0x1p-6, 1, -0x1.c4p+127, 0x1p-130, math.Inf(-1)}
	RoundBF16(x)
	for i := range x {
		if x[i] != want[i] {
			t.Errorf("element %d: %v, want %v", i, x[i], want[i])
		}
	}
}

// TestCPUBF16 checks CPU.BF16 on a random model: the first layer's qkv is
// exactly RoundBF16 of the float64 run's (the same input up to there);
// every kept qkv and fc value of every layer is a bfloat16; the loss moves
// by bfloat16's rounding, more than nothing and less than 1%.
func TestCPUBF16(t *testing.T) {
	c := gradCheckShape
	m := randomModel(t, c, 3)
	const batch, seq = 2, 5
	tokens, targets := make([]int32, batch*seq), make([]int32, batch*seq)
	for i := range tokens {
		tokens[i], targets[i] = int32(i*3%c.Vocab), int32(i*5%c.Vocab)
	}
	exact, err := m.Forward(tokens, targets, batch, seq)
	if err != nil {
		t.Fatal(err)
	}
	m.BF16 = true
	rounded, err := m.Forward(tokens, targets, batch, seq)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float64(nil), exact.blocks[0].qkv...)
	RoundBF16(want)
	for i, v := range rounded.blocks[0].qkv {
		if v != want[i] {
			t.Fatalf("layer 0 qkv[%d] = %v, want %v (RoundBF16 of %v)", i, v, want[i], exact.blocks[0].qkv[i])
		}
	}
	for l, b := range rounded.blocks {
		for name, x := range map[string][]float64{"qkv": b.qkv, "fc": b.fc} {
			for i, v := range x {
				if float64(bf16.Round(float32(v))) != v {
					t.Fatalf("layer %d %s[%d] = %v: not a bfloat16", l, name, i, v)
				}
			}
		}
	}
	if d := math.Abs(rounded.Loss - exact.Loss); !(d > 0 && d < 0.01*exact.Loss) {
		t.Errorf("loss %v with BF16, %v without", rounded.Loss, exact.Loss)
	}
}

// TestCPUHeadBF16 checks CPU.HeadBF16 on a random model against the
// roundings rebuilt here from the float64 run's tensors:
//   - the head's input is RoundBF16 of the float64 LayerNorm output, and
//     the logits are RoundBF16 of the float64 product of that input with
//     the embedding, bit for bit (so every logit is a bfloat16), the loss
//     their cross-entropy; it moves by bfloat16's rounding, more than
//     nothing and less than 1%;
//   - the final LayerNorm's gradients are those of the input gradient
//     RoundBF16(RoundBF16(dlogits)·W), bit for bit;
//   - the embedding rows of tokens that are no input (whose gradient is
//     the head's alone) are RoundBF16 of RoundBF16(dlogits)ᵀ·input, bit
//     for bit; every gradient stays within 5% (relative L2) of the
//     float64 run's.
func TestCPUHeadBF16(t *testing.T) {
	c := gradCheckShape
	m := randomModel(t, c, 4)
	const batch, seq = 2, 5
	n, h, v := batch*seq, c.Hidden, c.Vocab
	tokens, targets := make([]int32, n), make([]int32, n)
	for i := range tokens {
		tokens[i], targets[i] = int32(i%4), int32(i*5%v) // tokens 4.. are no input
	}
	exact, err := m.Forward(tokens, targets, batch, seq)
	if err != nil {
		t.Fatal(err)
	}
	gExact := m.Backward(exact)
	m.HeadBF16 = true
	a, err := m.Forward(tokens, targets, batch, seq)
	if err != nil {
		t.Fatal(err)
	}
	lnf := append([]float64(nil), exact.lnf...)
	RoundBF16(lnf)
	logits := make([]float64, n*v)
	Linear(logits, lnf, m.W["embed.tokens"], nil, n, h, v)
	RoundBF16(logits)
	probs := make([]float64, n*v)
	loss := CrossEntropy(probs, logits, targets, n, v)
	if !slices.Equal(a.lnf, lnf) || !slices.Equal(a.logits, logits) || a.Loss != loss {
		t.Fatalf("forward: the head's input, logits or loss (%v, want %v) differ from the rounded float64 run's", a.Loss, loss)
	}
	if d := math.Abs(a.Loss - exact.Loss); !(d > 0 && d < 0.01*exact.Loss) {
		t.Errorf("loss %v with HeadBF16, %v without", a.Loss, exact.Loss)
	}

	g := m.Backward(a)
	dlogits := make([]float64, n*v)
	CrossEntropyBackward(dlogits, probs, targets, n, v, 1)
	RoundBF16(dlogits)
	dln, dw := make([]float64, n*h), make([]float64, v*h)
	LinearBackward(dln, dw, nil, dlogits, lnf, m.W["embed.tokens"], n, h, v)
	RoundBF16(dln)
	RoundBF16(dw)
	gw, gb := make([]float64, h), make([]float64, h)
	LayerNormBackward(make([]float64, n*h), gw, gb, dln, a.xf, a.meanf, a.rstdf, m.W["final_ln.weight"], n, h)
	if !slices.Equal(g["final_ln.weight"], gw) || !slices.Equal(g["final_ln.bias"], gb) {
		t.Errorf("final LayerNorm gradients differ from those of the rounded input gradient")
	}
	if got, want := g["embed.tokens"][4*h:], dw[4*h:]; !slices.Equal(got, want) {
		t.Errorf("embedding gradient of tokens that are no input: %v, want %v", got, want)
	}
	for name, want := range gExact {
		var num, den float64
		for i, w := range want {
			num += (g[name][i] - w) * (g[name][i] - w)
			den += w * w
		}
		if rel := math.Sqrt(num / den); !(rel < 0.05) {
			t.Errorf("%s: gradient relative L2 difference %.3g from the float64 run's", name, rel)
		}
	}
}
