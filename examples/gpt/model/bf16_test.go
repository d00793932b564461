package model

import (
	"math"
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
