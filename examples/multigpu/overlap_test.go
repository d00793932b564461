package main

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/plan"
)

// TestAccount checks the accounting against the two ends it must give:
// nothing hidden (the iteration is compute then the whole step: exposed =
// the communication) and everything hidden (compute plus the optimizer's
// own work: exposed = 0), and a case between.
func TestAccount(t *testing.T) {
	const c, m, o = 100.0, 30.0, 5.0
	for _, tc := range []struct {
		name       string
		iteration  float64
		exposed    float64
		fraction   float64
		overheadPc float64
	}{
		{"nothing hidden", c + o + m, m, 1, 100 * m / (c + o)},
		{"all hidden", c + o, 0, 0, 0},
		{"a third exposed", c + o + m/3, m / 3, 1.0 / 3, 100 * m / 3 / (c + o)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := account(c, m, m+o, tc.iteration)
			if math.Abs(e.Optimizer-o) > 1e-12 || math.Abs(e.Exposed-tc.exposed) > 1e-12 {
				t.Errorf("optimizer %g exposed %g, want %g and %g", e.Optimizer, e.Exposed, o, tc.exposed)
			}
			if math.Abs(e.ExposedFraction()-tc.fraction) > 1e-12 || math.Abs(100*e.Overhead()-tc.overheadPc) > 1e-9 {
				t.Errorf("fraction %g overhead %g%%, want %g and %g%%", e.ExposedFraction(), 100*e.Overhead(), tc.fraction, tc.overheadPc)
			}
		})
	}
	if f := account(1, 0, 1, 2).ExposedFraction(); f != 0 {
		t.Errorf("exposed fraction without communication: %g, want 0", f)
	}
	w := worst([]exposure{account(10, 2, 3, 12), account(11, 1, 4, 11)})
	if want := account(11, 2, 4, 12); w != want {
		t.Errorf("worst %+v, want %+v", w, want)
	}
}

// TestOverlapTargets checks the goals' verdicts: the exposure goal does
// not apply when compute is shorter than communication.
func TestOverlapTargets(t *testing.T) {
	for _, tc := range []struct {
		name          string
		e             exposure
		exposedOK, na bool
		overheadOK    bool
	}{
		{"hidden", account(100, 30, 35, 106), true, false, true},
		{"exposed", account(100, 30, 35, 120), false, false, false},
		{"compute short", account(20, 30, 35, 40), false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := overlapTargets(2, &overlapResult{Medians: tc.e})
			if ts[0].OK != tc.exposedOK || ts[0].NA != tc.na || ts[1].OK != tc.overheadOK {
				t.Errorf("targets %+v", ts)
			}
		})
	}
}

// TestComputeFlags checks the flag errors of -compute.
func TestComputeFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown", []string{"-compute", "fake"}, "-compute"},
		{"cpu", []string{"-compute", "gemm", "-backend", "cpu"}, "-backend gpu"},
		{"micro without gemm", []string{"-micro-batches", "2"}, "-micro-batches"},
		{"micro zero", []string{"-compute", "gemm", "-micro-batches", "0"}, "-micro-batches"},
		{"tokens", []string{"-compute", "gemm", "-tokens", "100"}, "-tokens"},
		{"warmup", []string{"-compute", "gemm", "-warmup", "0"}, "-warmup"},
		{"recipe", []string{"-compute", "gemm", "-recipe", "mx"}, "recipe"},
		{"shape", []string{"-compute", "gemm", "-vocab", "1000"}, "multiples of 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errb.String(), tc.want)
			}
		})
	}
	o, err := parseFlags([]string{"-compute", "gemm", "-recipe", "tile", "-tokens", "4096", "-micro-batches", "4"}, &bytes.Buffer{})
	if err != nil || o.micro != 4 || o.grads.Tokens != 4096 || o.recipe.Scaling != fp8.Block128x128 {
		t.Errorf("valid flags: %+v, %v", o, err)
	}
}

// TestReportOverlap checks the summary of -compute gemm: the slowest
// rank's medians, the baseline, summary.json, the chart, and -replot of it.
func TestReportOverlap(t *testing.T) {
	dir := t.TempDir()
	bl := filepath.Join(dir, "torch.json")
	if err := os.WriteFile(bl, []byte(`{"world": 2, "params": 660992, "tokens": 64, "medians": {"compute": 110, "comm": 30, "step": 36, "iteration": 140}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o := options{gpt: smallGPT, out: dir, baseline: bl, recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}}
	ranks := []*rankSummary{
		{Rank: 0, World: 2, Backend: "test", Params: smallGPT.NumParams(), GradNorm: 100, ExpectedGradNorm: 104, Overlap: &overlapRank{Medians: account(100, 20, 25, 106), Tokens: 64, Micro: 1, Passes: 3}},
		{Rank: 1, World: 2, Backend: "test", Params: smallGPT.NumParams(), Overlap: &overlapRank{Medians: account(101, 21, 24, 107), Tokens: 64, Micro: 1, Passes: 3, HostSyncs: 1}},
	}
	var out bytes.Buffer
	if err := report(o, ranks, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PyTorch (torch_overlap)", "[ok  ] exposed communication", "[ok  ] overlapped iteration no slower than PyTorch's", "[ok  ] the GEMMs' weight gradients reach the optimizer", "host waits for the GPU per overlapped iteration: 1.00\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	s := readSummary(t, dir)
	if s.Overlap == nil || s.Overlap.Medians != account(101, 21, 25, 107) || s.Overlap.Baseline.Medians.Exposed != 140-110-6 {
		t.Fatalf("summary overlap %+v", s.Overlap)
	}
	checkPNG(t, filepath.Join(dir, "step_phases.png"))
	os.Remove(filepath.Join(dir, "step_phases.png"))
	out.Reset()
	if err := replot(options{replot: filepath.Join(dir, "summary.json")}, &out); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, filepath.Join(dir, "step_phases.png"))
}

// TestExpectedGEMMNorm checks the norm the random operands predict against
// a simulation: weight gradients dyᵀx of random operands summed over the
// micro-batches, the other gradients output-gradient samples, two ranks
// averaged.
func TestExpectedGEMMNorm(t *testing.T) {
	gpt := plan.GPTConfig{Layers: 1, Hidden: 32, FFN: 64, Vocab: 48, Positions: 16}
	const tokens, micro, d = 256, 2, 2
	r := rand.New(rand.NewPCG(1, 2))
	var sq float64
	for _, p := range gpt.Params() {
		n := numElements(p.Shape)
		sum := make([]float64, n)
		for range d {
			if !isGEMM(p) {
				for k := range sum {
					sum[k] += dyStd * r.NormFloat64()
				}
				continue
			}
			out, in := p.Shape[0], p.Shape[1]
			x, dy := make([]float64, tokens*in), make([]float64, tokens*out)
			for k := range x {
				x[k] = r.NormFloat64()
			}
			for k := range dy {
				dy[k] = dyStd * r.NormFloat64()
			}
			for o := range out {
				for i := range in {
					var s float64
					for tk := range tokens {
						s += dy[tk*out+o] * x[tk*in+i]
					}
					sum[o*in+i] += micro * s
				}
			}
		}
		for _, v := range sum {
			sq += (v / d) * (v / d)
		}
	}
	got, want := math.Sqrt(sq), expectedGEMMNorm(gpt.Params(), tokens, micro, d)
	if math.Abs(got/want-1) > 0.03 {
		t.Errorf("simulated norm %g, predicted %g", got, want)
	}
}
