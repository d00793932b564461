package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/gpt/curve"
	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/model"
)

// TestHeadPrecisionCPU trains the same run on the CPU path with
// -head-precision fp32 and bf16 (the default): the training losses of the first step
// (the same weights, only the head's rounding differs) and every later
// one differ, by less than 1% (bfloat16's rounding of the head, not a
// different model), and the bf16 run repeats bit for bit. Its curve
// records the head precision and the validation sequences.
func TestHeadPrecisionCPU(t *testing.T) {
	dir := writeData(t)
	common := []string{"-data", dir, "-steps", "4", "-sample", "0"}
	fp32 := trainFlags(t, append(common, "-head-precision", "fp32")...)
	path := filepath.Join(t.TempDir(), "bf16.json")
	bf16 := trainFlags(t, append(common, "-curve", path)...) // the default
	c, err := curve.Read(path)
	must(t, err)
	if c.Head != "bf16" || c.Eval == nil || *c.Eval != (curve.Eval{Windows: 2, Spread: true}) {
		t.Errorf("curve records head %q, validation %+v; want bf16, 2 spread windows", c.Head, c.Eval)
	}
	again := trainFlags(t, append(common, "-head-precision", "bf16")...)
	if !slices.Equal(bf16, again) {
		t.Fatalf("two bf16-head runs: losses %v and %v", bf16, again)
	}
	for i := range fp32 {
		if d := math.Abs(bf16[i] - fp32[i]); !(d > 0 && d < 0.01*fp32[i]) {
			t.Errorf("step %d: loss %v with the bf16 head, %v with fp32", i+1, bf16[i], fp32[i])
		}
	}
}

// TestEvalSpreadCPU checks that the CPU path's validation loss (validLoss)
// is the mean loss of windows 0, ⌊total/3⌋ and ⌊2·total/3⌋ of the split
// for three windows with spread, of windows 0, 1 and 2 without (the
// windows written out here, each window's loss from the float64 model).
func TestEvalSpreadCPU(t *testing.T) {
	_, valid, err := data.ReadTokens(filepath.Join(writeData(t), data.ValidFile))
	must(t, err)
	m, err := model.NewCPU(model.Config{Layers: 1, Hidden: 16, Heads: 2, FFN: 32, Vocab: data.Vocab, Seq: 16})
	must(t, err)
	total := data.ValidWindows(valid, 16)
	for _, c := range []struct {
		spread bool
		ks     []int
	}{{true, []int{0, total / 3, 2 * total / 3}}, {false, []int{0, 1, 2}}} {
		got, err := validLoss(m, valid, 3, c.spread)
		must(t, err)
		want := 0.0
		in, tg := make([]int32, 16), make([]int32, 16)
		for _, k := range c.ks {
			data.Window(in, tg, valid, 16, k)
			a, err := m.Forward(in, tg, 1, 16)
			must(t, err)
			want += a.Loss
		}
		if want /= 3; got != want {
			t.Errorf("spread %v: validation loss %v, want %v (windows %v of %d)", c.spread, got, want, c.ks, total)
		}
	}
}

// TestTorchEvalWindows runs eval_windows of scripts/gpt/torch_gpt.py (the
// function alone: the script needs torch and numpy) with python3 and
// checks that it names the windows data.EvalWindows names, spread and
// not, for the shapes of the loss runs and a few others. It skips without
// python3.
func TestTorchEvalWindows(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	src, err := os.ReadFile("../../scripts/gpt/torch_gpt.py")
	must(t, err)
	s := string(src)
	start := strings.Index(s, "def eval_windows(")
	end := strings.Index(s[max(start, 0):], "\n\n\n")
	if start < 0 || end < 0 {
		t.Fatal("scripts/gpt/torch_gpt.py: no function eval_windows")
	}
	cases := [][3]int{{192, 12400, 1}, {192, 12400, 0}, {4, 10, 1}, {10, 10, 1}, {1, 7, 1}, {200, 201, 1}, {96, 12539, 1}}
	arg, err := json.Marshal(cases)
	must(t, err)
	prog := "import json, sys\n" + s[start:start+end] + "\nprint(json.dumps([eval_windows(c, n, bool(s)) for c, n, s in json.loads(sys.argv[1])]))\n"
	out, err := exec.Command(py, "-c", prog, string(arg)).Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var got [][]int
	must(t, json.Unmarshal(out, &got))
	if len(got) != len(cases) {
		t.Fatalf("python3 gave %d lists for %d cases", len(got), len(cases))
	}
	for i, c := range cases {
		want, err := data.EvalWindows(c[0], c[1], c[2] == 1)
		must(t, err)
		if !slices.Equal(got[i], want) {
			t.Errorf("%d of %d windows (spread %d): torch_gpt.py reads %v, examples/gpt %v", c[0], c[1], c[2], got[i], want)
		}
	}
}
