package gpumodel

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/gemm"
)

// TestProfileTable checks, without a GPU, the Profiler's bookkeeping:
// intervals summed by the phase of their start, every phase named once,
// gemm's stages mapped to their phases, and the table: the phases with
// time in Phase order with their mean per step, none without, shares that
// add up, and the total; a table before any step refused.
func TestProfileTable(t *testing.T) {
	ms := time.Millisecond
	got := attribute([]Phase{PhaseEmbed, PhaseGEMM, PhaseLayerNorm, PhaseGEMM}, []time.Duration{1 * ms, 2 * ms, 3 * ms, 4 * ms})
	if got[PhaseEmbed] != ms || got[PhaseGEMM] != 6*ms || got[PhaseLayerNorm] != 3*ms || got[PhaseHead] != 0 {
		t.Errorf("attribute: %v", got)
	}
	seen := map[string]bool{}
	for ph := range numPhases {
		name := ph.String()
		if name == "" || seen[name] || strings.HasPrefix(name, "Phase(") {
			t.Errorf("phase %d named %q", ph, name)
		}
		seen[name] = true
	}
	for s, want := range map[gemm.Stage]Phase{gemm.StageQuantize: PhaseQuantize, gemm.StageTranspose: PhaseTranspose, gemm.StageGEMM: PhaseGEMM} {
		if phaseOf(s) != want {
			t.Errorf("stage %v: phase %v, want %v", s, phaseOf(s), want)
		}
	}
	var p Profiler
	var buf bytes.Buffer
	if err := p.WriteTable(&buf); err == nil {
		t.Error("a table without a collected step: no error")
	}
	p.total[PhaseGEMM], p.total[PhaseAttention], p.steps = 6*ms, 2*ms, 2
	if err := p.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	want := "| phase | ms per step | share |\n|---|---|---|\n| fp8 gemm | 3.000 | 75.0% |\n| attention fwd | 1.000 | 25.0% |\n| all (2 steps) | 4.000 | 100% |\n"
	if buf.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", buf.String(), want)
	}
	p.Reset()
	if tot, n := p.Totals(); n != 0 || tot != ([numPhases]time.Duration{}) {
		t.Errorf("after Reset: %v over %d steps", tot, n)
	}
	var nilp *Profiler
	nilp.Mark(PhaseGEMM) // a model without a profiler marks nothing
	nilp.Reset()
}

// TestGPUProfile runs two micro-batches of the default model with a
// Profiler and without: the same bits (events change nothing), and time
// in every phase the default configuration queues work in over one
// collected step: the zeroing of the gradients (PhaseOptimizer), the
// embedding, the fused LayerNorms and GELU, qkv's bias pass and the final
// residual, gemm's quantization (attention's output, the output
// gradients) and transposes, the GEMMs, attention both ways, the
// backward's GELU, LayerNorm and bias gradients, and the head. A Collect
// with no Mark since the last (the profiler detached) is refused.
func TestGPUProfile(t *testing.T) {
	r := newRig(t, testShape, 1e-3, recipes[0].r)
	base := twoMicroBatches(t, r, r.model(t, testShape, 2, 32, Options{}))
	m := r.model(t, testShape, 2, 32, Options{})
	p := NewProfiler(m.d, m.s)
	t.Cleanup(func() { p.Close() })
	m.SetProfiler(p)
	got := twoMicroBatches(t, r, m)
	if err := p.Collect(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.losses, base.losses) || !bytes.Equal(got.logits, base.logits) {
		t.Errorf("losses or logits differ with a profiler")
	}
	for _, q := range testShape.Params() {
		if !bytes.Equal(got.grads[q.Name], base.grads[q.Name]) {
			t.Errorf("the gradient of %s differs with a profiler", q.Name)
		}
	}
	tot, n := p.Totals()
	if n != 1 {
		t.Fatalf("%d steps collected, want 1", n)
	}
	for _, ph := range []Phase{PhaseOptimizer, PhaseEmbed, PhaseLayerNorm, PhaseGELU, PhaseQuantize, PhaseTranspose, PhaseGEMM, PhaseAttention,
		PhaseAttentionBwd, PhaseLayerNormBwd, PhaseGELUBwd, PhaseBiasGrad, PhaseHead, PhaseBias} {
		if tot[ph] <= 0 {
			t.Errorf("no time in phase %v", ph)
		}
	}
	var buf bytes.Buffer
	if err := p.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("profile of two micro-batches:\n%s", buf.String())
	m.SetProfiler(nil)
	twoMicroBatches(t, r, m)
	if err := p.Collect(); err == nil {
		t.Errorf("Collect after SetProfiler(nil) and more work: no error (marks were recorded)")
	}
}
