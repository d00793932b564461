package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/plan"
)

var smallGPT = plan.GPTConfig{Layers: 2, Hidden: 128, FFN: 512, Vocab: 1000, Positions: 64}

var smallFlags = []string{"-backend", "cpu", "-layers", "2", "-hidden", "128", "-ffn", "512", "-vocab", "1000", "-positions", "64"}

// TestInProcessRun runs the example on two in-process CPU ranks and checks
// its files and the gradient norm the optimizer measured against the one
// the gradient model predicts.
func TestInProcessRun(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := append(slices.Clone(smallFlags), "-ranks", "2", "-warmup", "1", "-steps", "2", "-plain-steps", "1", "-out", dir)
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"[rank 0] step   4/4 plain", "[rank 1] step   1/4 warm-up", "== summary: 660992 parameters on 2 ranks", "reduce_scatter"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	s := readSummary(t, dir)
	if s.World != 2 || len(s.Ranks) != 2 || s.Params != smallGPT.NumParams() || len(s.PhaseMs) != len(phaseNames) {
		t.Fatalf("summary: world %d, %d ranks, %d params, %d phases", s.World, len(s.Ranks), s.Params, len(s.PhaseMs))
	}
	for _, r := range s.Ranks {
		if rel := math.Abs(r.GradNorm/r.ExpectedGradNorm - 1); rel > 0.05 {
			t.Errorf("rank %d: gradient norm %g, the model expects %g", r.Rank, r.GradNorm, r.ExpectedGradNorm)
		}
		pred, _ := optimizer.PredictMemory(smallGPT.Params(), 2, optimizer.Config{})
		if r.Predicted != pred.Total() {
			t.Errorf("rank %d: predicted %d, PredictMemory %d", r.Rank, r.Predicted, pred.Total())
		}
	}
	if s.Ranks[0].GradNorm != s.Ranks[1].GradNorm {
		t.Errorf("ranks disagree on the gradient norm: %g and %g", s.Ranks[0].GradNorm, s.Ranks[1].GradNorm)
	}
	for _, name := range []string{"memory_plan.png", "step_phases.png"} {
		checkPNG(t, filepath.Join(dir, name))
	}
}

// readSummary reads the summary.json a run wrote into dir.
func readSummary(t *testing.T, dir string) summary {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("%s: %v", path, err)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"moments", []string{"-moments", "fp16"}, 2},
		{"backend", []string{"-backend", "tpu"}, 2},
		{"steps", []string{"-steps", "0"}, 2},
		{"model", []string{"-hidden", "0"}, 2},
		{"extra", []string{"x"}, 2},
		{"gpu without the launcher", []string{"-backend", "gpu"}, 1},
		{"help", []string{"-h"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.args, &out, &errb); code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errb.String())
			}
		})
	}
}

// TestGradModel checks the generated gradients against the model: each
// tensor's sample standard deviation against std (token embedding: only
// rows in the micro-batch are non-zero), and that the bytes do not depend
// on the number of workers.
func TestGradModel(t *testing.T) {
	m := gradModel{GPT: smallGPT, Scale: 1e-3, Decay: 0.9, Tokens: 500, DType: buffer.BFloat16}
	params := smallGPT.Params()
	g1 := m.generate(params, 7, 1)
	g4 := m.generate(params, 7, 4)
	counts := m.tokenCounts(7)
	for i, p := range params {
		if !bytes.Equal(g1[i], g4[i]) {
			t.Fatalf("%s: 1 and 4 workers give different gradients", p.Name)
		}
		n := numElements(p.Shape)
		var sq float64
		var nonzero int
		for k := range n {
			x := float64(fp8.Float32FromBF16(binary.LittleEndian.Uint16(g1[i][2*k:])))
			sq += x * x
			if x != 0 {
				nonzero++
			}
		}
		want := m.std(p) * m.std(p) * float64(n)
		if p.Name == "embed.tokens" {
			rows := 0
			var c int32
			for _, v := range counts {
				if v > 0 {
					rows++
				}
				c += v
			}
			if c != int32(m.Tokens) || nonzero > rows*smallGPT.Hidden || nonzero < rows*smallGPT.Hidden*9/10 {
				t.Errorf("token embedding: %d tokens, %d rows used, %d non-zero elements", c, rows, nonzero)
			}
			// sum over rows of c*V/T = V: the same expectation as a dense tensor.
			want = m.std(p) * m.std(p) * float64(n)
		}
		if n >= 4096 && math.Abs(sq/want-1) > 0.15 {
			t.Errorf("%s: sum of squares %g, want %g", p.Name, sq, want)
		}
	}
	if other := m.generate(params, 8, 2); bytes.Equal(other[2], g1[2]) {
		t.Error("another seed gives the same gradients")
	}
	// The standard deviations follow the documented rules.
	std := map[string]float64{}
	for _, p := range params {
		std[p.Name] = m.std(p)
	}
	for _, tc := range []struct {
		name string
		want float64
	}{
		{"head.weight", 1e-3 / math.Sqrt(128)},
		{"layer1.mlp.down.weight", 1e-3 / math.Sqrt(512)},
		{"layer0.mlp.down.weight", 0.9e-3 / math.Sqrt(512)},
		{"layer1.attn.qkv.bias", 1e-3 / math.Sqrt(128)},
		{"layer1.ln2.weight", 1e-4 / math.Sqrt(128)},
		{"final_ln.bias", 1e-4 / math.Sqrt(128)},
		{"embed.positions", 0.81e-3 / math.Sqrt(128)},
	} {
		if math.Abs(std[tc.name]/tc.want-1) > 1e-12 {
			t.Errorf("std of %s = %g, want %g", tc.name, std[tc.name], tc.want)
		}
	}
}

// TestInitValues checks that a tensor made in pieces equals the tensor
// made whole, and the documented values.
func TestInitValues(t *testing.T) {
	init := initValues(4)
	whole := make([]float32, 3*chunk+5)
	if err := init("layer0.attn.out.weight", 0, whole); err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{1, chunk - 1, chunk + 17} {
		part := make([]float32, len(whole)-cut)
		if err := init("layer0.attn.out.weight", cut, part); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(part, whole[cut:]) {
			t.Fatalf("piece at %d differs from the whole tensor", cut)
		}
	}
	var sq float64
	for _, x := range whole {
		sq += float64(x) * float64(x)
	}
	if std, want := math.Sqrt(sq/float64(len(whole))), 0.02/math.Sqrt(8); math.Abs(std/want-1) > 0.01 {
		t.Errorf("std %g, want %g", std, want)
	}
	one, zero := make([]float32, 3), make([]float32, 3)
	init("layer1.ln1.weight", 0, one)
	init("layer1.mlp.up.bias", 0, zero)
	if !slices.Equal(one, []float32{1, 1, 1}) || !slices.Equal(zero, []float32{0, 0, 0}) {
		t.Errorf("norm weight %v, bias %v", one, zero)
	}
}

// TestPlanBars checks the configurations of memory_plan.png against the
// published formulas (plan.Baselines, and 4 + 16/d for the ZeRO-1
// baseline), and distopt's bars against PredictMemory.
func TestPlanBars(t *testing.T) {
	params := plan.GPT13B.Params()
	n := float64(plan.GPT13B.NumParams())
	for _, d := range []int{1, 2, 8, 64} {
		bars, err := planBars(params, d, optimizer.Config{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{"PyTorch ZeRO-1 BF16 (torch_zero1.py)": zero1PerParam(d)}
		for _, b := range plan.Baselines {
			if !b.Distopt {
				want[b.Name] = b.BytesPerParam(d)
			}
		}
		for _, m := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
			r, _ := optimizer.PredictMemory(params, d, optimizer.Config{FirstMomentType: optimizer.MomentOf(m), SecondMomentType: optimizer.MomentOf(m)})
			name := "distopt FP8, FP32 moments"
			if m == buffer.BFloat16 {
				name = "distopt FP8, BF16 moments"
			}
			want[name] = float64(r.Total()) / n
		}
		if len(bars) != len(want) {
			t.Fatalf("%d bars, want %d", len(bars), len(want))
		}
		for _, b := range bars {
			w, ok := want[b.Label]
			if !ok {
				t.Fatalf("unexpected bar %q", b.Label)
			}
			if got := b.Total() * (1 << 30) / n; math.Abs(got-w) > 1e-9*w {
				t.Errorf("d=%d %s: %.6f bytes/param, want %.6f", d, b.Label, got, w)
			}
		}
	}
}

// TestTargetsAndCharts feeds the report a made-up GPU run and baseline and
// checks the verdicts and the charts.
func TestTargetsAndCharts(t *testing.T) {
	const g = 1 << 30
	pred := int64(12 * g)
	rank := func(r int, peak int64) *rankSummary {
		return &rankSummary{Rank: r, World: 2, Params: 1000, Predicted: pred, PhaseMs: []float64{4, 0.3, 2, 0.1, 0.9, 2}, PlainStepMs: 9,
			Memory: &memSummary{Measure: "process", Context: g / 2, NCCL: g / 4, Optimizer: pred, Peak: peak}}
	}
	bl := &baseline{World: 2, Params: 1000, PhaseMs: map[string]float64{"reduce_scatter": 4, "norm": 0.5, "update": 3, "cast": 0.6, "all_gather": 4},
		PlainStepMs: 12, PredictedBytes: 16 * g, Ranks: []baselineRank{{Rank: 0, MaxAllocated: 16 * g, NVMLContext: g / 2, NVMLNCCL: g / 4, NVMLPeak: 17 * g}}}
	for _, tc := range []struct {
		name string
		peak int64
		bl   *baseline
		want []bool
	}{
		{"all met", pred + g*3/4 + g/10, bl, []bool{true, true, true, true}},
		{"memory off by 10%", pred*11/10 + g*3/4, bl, []bool{false, false, true, true}},
		{"no baseline", pred + g*3/4, nil, []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &summary{World: 2, Params: 1000, Phases: phaseNames, PhaseMs: []float64{4, 0.3, 2, 0.1, 0.9, 2}, PlainMs: 9,
				Ranks: []*rankSummary{rank(0, tc.peak), rank(1, tc.peak)}, Baseline: tc.bl}
			ts := targets(s)
			if len(ts) != len(tc.want) {
				t.Fatalf("%d targets, want %d: %+v", len(ts), len(tc.want), ts)
			}
			for i, tg := range ts {
				if tg.OK != tc.want[i] {
					t.Errorf("%s: ok=%v, want %v (%s)", tg.Name, tg.OK, tc.want[i], tg.Detail)
				}
			}
		})
	}
	slow := *bl
	slow.PhaseMs = map[string]float64{"all_gather": 3}
	slow.PlainStepMs = 8
	s := &summary{World: 2, Params: 1000, PhaseMs: []float64{4, 0.3, 2, 0.1, 0.9, 2}, PlainMs: 9, Ranks: []*rankSummary{rank(0, pred+g*3/4)}, Baseline: &slow}
	ts := targets(s)
	if ts[2].OK || ts[3].OK {
		t.Errorf("a slower step and a 0.67x all-gather pass: %+v", ts)
	}
	dir := t.TempDir()
	o := options{gpt: smallGPT, out: dir}
	files, err := writeCharts(o, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("files %v, want 3 charts", files)
	}
	for _, f := range files {
		checkPNG(t, f)
	}
	var w bytes.Buffer
	writeMemory(&w, s)
	writePhases(&w, o, s)
	for _, want := range []string{"PyTorch rank 0", "distopt / PyTorch", "0.667x"} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, w.String())
		}
	}
}

// TestReplot draws the charts of a summary.json written by the report and
// checks that -replot writes the same three charts, as decodable PNGs, and
// refuses a file that holds no run.
func TestReplot(t *testing.T) {
	dir := t.TempDir()
	s := summary{Model: smallGPT, World: 2, Params: 1000, Phases: phaseNames, PhaseMs: []float64{4, 0.3, 2, 0.1, 0.9, 2}, PlainMs: 9,
		Ranks: []*rankSummary{{Rank: 0, World: 2, Params: 1000, Predicted: 1 << 30, PhaseMs: []float64{4, 0.3, 2, 0.1, 0.9, 2},
			Memory: &memSummary{Measure: "process", Context: 1 << 29, NCCL: 1 << 28, Optimizer: 1 << 30, Peak: 2 << 30}}}}
	b, _ := json.Marshal(&s)
	path := filepath.Join(dir, "summary.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-replot", path}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, name := range []string{"memory_plan.png", "step_phases.png", "memory_measured.png"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("output %q does not name %s", out.String(), name)
		}
		checkPNG(t, filepath.Join(dir, name))
	}
	os.WriteFile(path, []byte("{}"), 0o644)
	if code := run([]string{"-replot", path}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no run") {
		t.Errorf("empty summary: exit %d, stderr %q", code, errb.String())
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := slices.Clone(tc.xs)
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
		if !slices.Equal(in, tc.xs) {
			t.Errorf("median modified its input")
		}
	}
}

// syncCounter is a CPU backend that counts Sync calls.
type syncCounter struct {
	backend.Backend
	syncs int
}

func (s *syncCounter) Sync() error { s.syncs++; return s.Backend.Sync() }

func TestPhaseSync(t *testing.T) {
	c := &syncCounter{Backend: cpu.New(1)}
	p := &phaseSync{Backend: c, Updates: 3}
	a := &backend.UpdateArgs{Rule: optimizer.RuleNone}
	if err := errors.Join(p.Update(a), p.Cast(&backend.CastArgs{})); err != nil {
		t.Fatal(err)
	}
	if c.syncs != 0 {
		t.Errorf("%d syncs with On unset", c.syncs)
	}
	p.On = true
	p.Update(a)
	p.Cast(&backend.CastArgs{})
	if c.syncs != 2 {
		t.Errorf("%d syncs with On set, want 2", c.syncs)
	}
	// With a communicator, the last Update of a step ends in a barrier of
	// all ranks, and only it (a Cast never: the gathers the optimizer
	// starts bucket by bucket would queue before it): a rank that makes one
	// call more than its peer blocks in the barrier alone.
	comms := inproc.New(2)
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			p := &phaseSync{Backend: cpu.New(1), Comm: comms[r], Ctx: context.Background(), On: true, Updates: 3}
			var err error
			for range 2 { // two steps
				for range 3 {
					err = errors.Join(err, p.Update(a))
				}
				for range 1 + r { // unequal counts of casts: no barrier to hang in
					err = errors.Join(err, p.Cast(&backend.CastArgs{}))
				}
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	one := &phaseSync{Backend: cpu.New(1), Comm: comms[0], Ctx: ctx, On: true, Updates: 2}
	if err := one.Update(a); err != nil {
		t.Fatalf("first of two updates: %v (no barrier expected)", err)
	}
	if err := one.Update(a); err == nil {
		t.Error("a barrier that one rank entered alone returned no error")
	}
	if ms, err := timeBarrier(context.Background(), inproc.New(1)[0], 5); err != nil || ms < 0 {
		t.Errorf("timeBarrier: %v ms, %v", ms, err)
	}
}

func TestParamLayer(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
	}{{"embed.tokens", -1}, {"layer0.ln1.weight", 0}, {"layer23.mlp.up.bias", 23}, {"final_ln.weight", 24}, {"head.weight", 24}, {"layerx.y", 24}} {
		if got := paramLayer(tc.name, 24); got != tc.want {
			t.Errorf("paramLayer(%q) = %d, want %d", tc.name, got, tc.want)
		}
	}
}
