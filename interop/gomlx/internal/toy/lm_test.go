package toy

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestLMBatch checks the language model's batches: every target is the
// next input byte (the windows are contiguous in the token stream), a
// batch depends only on its step and part, and parts differ.
func TestLMBatch(t *testing.T) {
	tokens := make([]uint16, 5000)
	for i := range tokens {
		tokens[i] = uint16(i*7919) % Vocab
	}
	m := &LM{Len: 32, Dim: 8, Heads: 2, Layers: 1, Train: tokens, Valid: tokens[:100], Seed: 3}
	x, y := m.Batch(4, 1, 3)
	xs, ys := tensors.MustCopyFlatData[int32](x), tensors.MustCopyFlatData[int32](y)
	if got := y.Shape().Dimensions; len(got) != 3 || got[0] != 3 || got[1] != 32 || got[2] != 1 {
		t.Fatalf("labels shaped %v", got)
	}
	for b := range 3 {
		row := xs[b*32 : (b+1)*32]
		start := -1
		for i := range len(tokens) - 33 {
			if int32(tokens[i]) == row[0] && int32(tokens[i+1]) == row[1] && int32(tokens[i+2]) == row[2] && int32(tokens[i+3]) == row[3] {
				start = i
				break
			}
		}
		if start < 0 {
			t.Fatalf("sequence %d is not a window of the tokens", b)
		}
		for k := range 32 {
			if row[k] != int32(tokens[start+k]) || ys[b*32+k] != int32(tokens[start+k+1]) {
				t.Fatalf("sequence %d, position %d: input %d label %d, tokens %d %d", b, k, row[k], ys[b*32+k], tokens[start+k], tokens[start+k+1])
			}
		}
	}
	x2, _ := m.Batch(4, 1, 3)
	x3, _ := m.Batch(4, 2, 3)
	same := func(a, b []int32) bool {
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	if !same(xs, tensors.MustCopyFlatData[int32](x2)) {
		t.Error("the same step and part gave another batch")
	}
	if same(xs, tensors.MustCopyFlatData[int32](x3)) {
		t.Error("two parts gave the same batch")
	}
	if _, err := LoadLM(t.TempDir(), 32, 8, 2, 1); err == nil {
		t.Error("LoadLM of a directory without token files did not fail")
	}
}
