package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestTokenRows checks TokenRows against a direct scan: the rows of each
// token, increasing, and nothing else.
func TestTokenRows(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const vocab = 9
	tokens := make([]int32, 500)
	for i := range tokens {
		tokens[i] = int32(r.IntN(vocab - 2)) // the last two tokens never occur
	}
	order, start := TokenRows(tokens, vocab)
	if len(order) != len(tokens) || len(start) != vocab+1 || start[0] != 0 || int(start[vocab]) != len(tokens) {
		t.Fatalf("%d rows, starts %v", len(order), start)
	}
	for v := range int32(vocab) {
		var want []int32
		for row, tok := range tokens {
			if tok == v {
				want = append(want, int32(row))
			}
		}
		got := order[start[v]:start[v+1]]
		if len(got) != len(want) {
			t.Fatalf("token %d: rows %v, want %v", v, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("token %d: rows %v, want %v", v, got, want)
			}
		}
	}
}
