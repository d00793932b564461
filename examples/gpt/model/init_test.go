package model

import (
	"hash/fnv"
	"math"
	"testing"
)

// TestInitSplitIndependent checks that the chunked, concurrent fill gives
// every element the value of the one-at-a-time formula, for a parameter
// spanning several chunks read at an offset (as a shard reads it), and that
// the draws look standard normal (mean and variance of 3M samples).
func TestInitSplitIndependent(t *testing.T) {
	c := Config{Layers: 2}
	name := "h.0.mlp.fc.weight"
	n := 3*initChunk + 7
	offset := 12345
	got := make([]float32, n)
	if err := c.Init()(name, offset, got); err != nil {
		t.Fatal(err)
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	key := h.Sum64()
	var sum, sq float64
	for i, v := range got {
		want := float32(0.02 * normal(key, uint64(offset+i)))
		if math.Float32bits(v) != math.Float32bits(want) {
			t.Fatalf("element %d: %v, want %v", i, v, want)
		}
		sum += float64(v) / 0.02
		sq += float64(v) / 0.02 * float64(v) / 0.02
	}
	mean, variance := sum/float64(n), sq/float64(n)-sum*sum/float64(n)/float64(n)
	if math.Abs(mean) > 0.005 || math.Abs(variance-1) > 0.01 {
		t.Errorf("draws: mean %.4f, variance %.4f; want about 0 and 1", mean, variance)
	}
}
