package main

import (
	"io"
	"strings"
	"testing"
)

// TestGPUProfileFlag trains the small model 4 steps with -profile and
// without: the same loss bits (the events change nothing), and a profile
// table after the run over the 3 steps after the first, with rows for
// the FP8 GEMMs, attention both ways, the LayerNorms and the optimizer.
func TestGPUProfileFlag(t *testing.T) {
	dir := writeData(t)
	var out strings.Builder
	a := gpuSmall(t, dir, 4, io.Discard)
	b := gpuSmall(t, dir, 4, &out, "-profile")
	sameLosses(t, "-profile", b, a)
	text := out.String()
	at := strings.Index(text, "profile: ")
	if at < 0 {
		t.Fatalf("no profile in the output:\n%s", text)
	}
	table := text[at:]
	for _, row := range []string{"| fp8 gemm |", "| attention fwd |", "| attention bwd |", "| layernorm |", "| optimizer |", "| all (3 steps) |"} {
		if !strings.Contains(table, row) {
			t.Errorf("the profile has no row %q:\n%s", row, table)
		}
	}
	t.Logf("%s", table)
}
