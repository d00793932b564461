package fp8

import (
	"math"
	"slices"
	"testing"
)

func TestAmaxHistory(t *testing.T) {
	h := NewAmaxHistory(3, HistoryMax)
	if got := h.Values(); !slices.Equal(got, []float32{0, 0, 0}) {
		t.Fatalf("initial history %v", got)
	}
	if s, inv := h.Scale(E4M3, 0, false); s != 1 || inv != 1 {
		t.Fatalf("scale of an empty history = %g, %g, want 1, 1", s, inv)
	}
	for _, a := range []float32{5, 2, 3, 1} {
		h.Push(a)
	}
	if got := h.Values(); !slices.Equal(got, []float32{2, 3, 1}) {
		t.Fatalf("history %v, want [2 3 1] (oldest dropped)", got)
	}
	if got := h.Reduced(HistoryMax); got != 3 {
		t.Errorf("Reduced(max) = %g, want 3", got)
	}
	if got := h.Reduced(HistoryMostRecent); got != 1 {
		t.Errorf("Reduced(most recent) = %g, want 1", got)
	}
	if s, _ := h.Scale(E4M3, 0, false); s != 448.0/3 {
		t.Errorf("Scale = %g, want 448/3", s)
	}
	h.Push(float32(math.Inf(1)))
	if s, _ := h.Scale(E4M3, 0, false); s != 1 {
		t.Errorf("Scale with Inf in history = %g, want 1", s)
	}
	m := Recipe{Format: E4M3, Scaling: TensorDelayed, HistoryLen: 2, HistoryReduce: HistoryMostRecent}.NewHistory()
	m.Push(8)
	m.Push(2)
	if s, _ := m.Scale(E4M3, 0, false); s != 224 {
		t.Errorf("most recent Scale = %g, want 448/2", s)
	}
	if !panics(func() { NewAmaxHistory(0, HistoryMax) }) {
		t.Error("NewAmaxHistory(0) did not panic")
	}
}

// TestQuantizeDelayed checks the order of delayed scaling over steps: each
// cast uses the history before its own amax is pushed.
func TestQuantizeDelayed(t *testing.T) {
	for _, red := range []HistoryReduce{HistoryMax, HistoryMostRecent} {
		r := Recipe{Format: E4M3, Scaling: TensorDelayed, HistoryLen: 2, HistoryReduce: red}
		h := r.NewHistory()
		steps := [][]float32{{1, -7}, {2, 0.5}, {0.25}, {3}}
		var past []float32
		for i, src := range steps {
			want := float32(1)
			if len(past) > 0 {
				window := past[max(0, len(past)-2):]
				a := window[len(window)-1]
				if red == HistoryMax {
					a = slices.Max(window)
				}
				want = 448 / a
			}
			tn, err := Quantize(src, []int{len(src)}, r, h)
			if err != nil {
				t.Fatal(err)
			}
			if got := tn.ScaleInv[0]; got != 1/want {
				t.Errorf("%v step %d: scale_inv %g, want %g", red, i, got, 1/want)
			}
			past = append(past, refAmax(src))
		}
	}
}
