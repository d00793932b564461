package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/gpt/curve"
	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/gpumodel"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
	"github.com/distopt/distopt/safetensors"
)

// writeData writes token files of a small, repetitive Go-like text into a
// temporary directory.
func writeData(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	for i := range 400 {
		fmt.Fprintf(&b, "func f%d(x int) int {\n\treturn x + %d // add\n}\n", i%17, i%7)
	}
	toks := data.Encode([]byte(b.String()))
	if err := data.WriteTokens(filepath.Join(dir, data.TrainFile), data.Vocab, toks); err != nil {
		t.Fatal(err)
	}
	if err := data.WriteTokens(filepath.Join(dir, data.ValidFile), data.Vocab, toks[:2000]); err != nil {
		t.Fatal(err)
	}
	return dir
}

var tinyFlags = []string{"-layers", "1", "-hidden", "32", "-heads", "2", "-ffn", "64", "-seq", "16", "-batch", "2", "-eval-every", "0", "-eval-windows", "2"}

func trainFlags(t *testing.T, args ...string) []float64 {
	t.Helper()
	o, err := parseFlags(append(append([]string{}, tinyFlags...), args...))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	losses, err := train(o, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return losses
}

// TestLossFalls trains two ranks with accumulation on a repetitive text:
// the mean loss of the last five steps must be well below that of the
// first five (ln 256 = 5.5 at the start).
func TestLossFalls(t *testing.T) {
	dir := writeData(t)
	losses := trainFlags(t, "-data", dir, "-ranks", "2", "-micro", "2", "-steps", "40", "-lr", "1e-2", "-sample", "20")
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	first, last := mean(losses[:5]), mean(losses[len(losses)-5:])
	if len(losses) != 40 || !(last < first-1.5) {
		t.Fatalf("%d losses; first five average %.3f, last five %.3f: want a fall of at least 1.5 nats", len(losses), first, last)
	}
}

// TestResume checks that a run stopped after step 3 and resumed from its
// checkpoint gives the losses of the uninterrupted run bit for bit: the
// returned training losses, and the curves written with -curve (every
// training loss, and the validation losses of every third step, checked by
// curve.Resume as the GPU resume check does). The stopped run evaluates at
// its stop, which the uninterrupted one does not: evaluations must not
// disturb training.
func TestResume(t *testing.T) {
	dir := writeData(t)
	cd := t.TempDir()
	common := []string{"-data", dir, "-ranks", "2", "-steps", "7", "-sample", "0", "-eval-every", "3"}
	full := trainFlags(t, append(common, "-ckpt", t.TempDir(), "-curve", filepath.Join(cd, "full.json"))...)
	ck := t.TempDir()
	first := trainFlags(t, append(common, "-ckpt", ck, "-stop-after", "4", "-curve", filepath.Join(cd, "first.json"))...)
	rest := trainFlags(t, append(common, "-ckpt", ck, "-resume", "-curve", filepath.Join(cd, "rest.json"))...)
	got := append(first, rest...)
	if len(got) != len(full) {
		t.Fatalf("%d losses stopped and resumed, %d uninterrupted", len(got), len(full))
	}
	for i := range full {
		if got[i] != full[i] {
			t.Fatalf("step %d: loss %v after resuming, %v uninterrupted", i+1, got[i], full[i])
		}
	}
	var cs []curve.Curve
	for _, name := range []string{"full", "first", "rest"} {
		c, err := curve.Read(filepath.Join(cd, name+".json"))
		must(t, err)
		cs = append(cs, c)
	}
	if n, err := curve.Resume(cs[0], cs[1:]...); err != nil || n != 7 {
		t.Fatalf("curves: %d, %v", n, err)
	}
	if len(cs[0].Valid) != 3 || cs[0].Valid[2].Step != 7 || len(cs[1].Valid) != 2 || cs[1].Valid[1].Step != 4 {
		t.Fatalf("validation steps: full %v, stopped %v: want 3, 6, 7 and 3, 4", cs[0].Valid, cs[1].Valid)
	}
	for i, p := range cs[0].Train {
		if p.Loss != full[i] || p.Step != i+1 {
			t.Fatalf("curve point %d: %+v, returned loss %v", i, p, full[i])
		}
	}
}

// TestSampleContext checks the GPU path's way of reading the next token's
// logits (packContext: the context at the start of row 0 of a whole
// batch, padding after it, the logits of its last position) on the
// float64 model: they must be the logits of the context run alone, for
// contexts from one token to the full context length; and the text
// generated through it must be the CPU path's.
func TestSampleContext(t *testing.T) {
	cfg := model.Config{Layers: 1, Hidden: 16, Heads: 2, FFN: 32, Vocab: data.Vocab, Seq: 8}
	m, err := model.NewCPU(cfg)
	must(t, err)
	const batch = 2
	in := make([]int32, batch*cfg.Seq)
	for i := range in {
		in[i] = 99 // what packContext must overwrite
	}
	batched := func(context []int32) ([]float64, error) {
		row := packContext(in, context)
		a, err := m.Forward(in, in, batch, cfg.Seq)
		if err != nil {
			return nil, err
		}
		return append([]float64(nil), a.Logits(row/cfg.Seq, row%cfg.Seq)...), nil
	}
	alone := cpuNext(m)
	for n := 1; n <= cfg.Seq; n++ {
		context := make([]int32, n)
		for i := range context {
			context[i] = int32('a' + (i*7)%26)
		}
		want, err := alone(context)
		must(t, err)
		got, err := batched(context)
		must(t, err)
		for i := range want {
			if d := math.Abs(got[i] - want[i]); d > 1e-12*(1+math.Abs(want[i])) {
				t.Fatalf("context of %d: logit %d is %v batched, %v alone", n, i, got[i], want[i])
			}
		}
	}
	a, err := generate(batched, []byte("func "), 20, cfg.Seq, 7)
	must(t, err)
	b, err := sample(m, []byte("func "), 20, 7)
	must(t, err)
	if string(a) != string(b) || len(a) != 25 || string(a[:5]) != "func " {
		t.Fatalf("generated %q batched, %q alone", a, b)
	}
}

// TestFlags checks that bad flags are refused with a message.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-preset", "huge"}, {"-backend", "tpu"}, {"-export-check", "maybe"}, {"-heads", "5"}, {"-ranks", "0"}, {"-resume"}, {"-recipe", "nope"}, {"extra"},
		{"-backend", "gpu", "-ranks", "2"}, {"-recompute"}, {"-keep-transposed"}, {"-epilogue"}, {"-fuse-dy"}, {"-profile"}, {"-backend", "gpu", "-profile", "-steps", "1"}, {"-backend", "gpu", "-fuse-dy", "-recipe", "tile"}, {"-backend", "gpu", "-recompute", "-keep-transposed"},
		{"-backend", "gpu", "-attention", "fused"}, {"-attention", "gemm"}, {"-attention", "flash"},
		{"-head-precision", "fp16"}, {"-head-precision", ""}, {"-eval-spread", "maybe"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	for _, c := range []struct {
		args []string
		want gpumodel.Attention
	}{{[]string{"-backend", "gpu", "-ranks", "2", "-export-init", "x"}, gpumodel.AttentionCuDNN}, {[]string{"-backend", "gpu", "-recompute"}, gpumodel.AttentionCuDNN}, // the default, auto, tries cuDNN first
		{[]string{"-backend", "gpu", "-attention", "cudnn"}, gpumodel.AttentionCuDNN},
		{[]string{"-backend", "gpu", "-attention", "AUTO"}, gpumodel.AttentionCuDNN},
		{[]string{"-backend", "gpu", "-attention", "gemm"}, gpumodel.AttentionGEMM}, {[]string{"-backend", "gpu", "-attention", "flash"}, gpumodel.AttentionFlash}} {
		o, err := parseFlags(c.args)
		if err != nil {
			t.Errorf("%v refused: %v", c.args, err)
		} else if o.attention != c.want {
			t.Errorf("%v: attention %v, want %v", c.args, o.attention, c.want)
		}
	}
	for _, c := range []struct {
		args   []string
		head   gpumodel.HeadPrecision
		spread bool
	}{{nil, gpumodel.HeadBF16, true}, {[]string{"-head-precision", "BF16", "-eval-spread=false"}, gpumodel.HeadBF16, false},
		{[]string{"-backend", "gpu", "-head-precision", "fp32"}, gpumodel.HeadFP32, true}, {[]string{"-head-precision", "FP32"}, gpumodel.HeadFP32, true}} {
		o, err := parseFlags(c.args)
		if err != nil || o.head != c.head || o.evalSpread != c.spread {
			t.Errorf("%v: head %v, spread %v, error %v; want %v, %v", c.args, o.head, o.evalSpread, err, c.head, c.spread)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"-data", t.TempDir()}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "prepare") {
		t.Errorf("missing data: exit %d, %q", code, errOut.String())
	}
}

// TestExportInit reads the exported file back: every tensor must hold the
// model's initial values, and the reference loss must be the CPU model's
// loss, with the weights read back, on the loader's first batch.
func TestExportInit(t *testing.T) {
	dir := writeData(t)
	path := filepath.Join(t.TempDir(), "init.safetensors")
	o, err := parseFlags(append(append([]string{}, tinyFlags...), "-data", dir, "-export-init", path))
	if err != nil {
		t.Fatal(err)
	}
	if err := exportInit(o, path, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	h, _, err := safetensors.Read(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	m := &model.CPU{Config: o.shape, W: map[string][]float64{}}
	init := o.shape.Init()
	for _, p := range o.shape.Params() {
		var tensor *safetensors.Tensor
		for i := range h.Tensors {
			if h.Tensors[i].Name == p.Name {
				tensor = &h.Tensors[i]
			}
		}
		if tensor == nil {
			t.Fatalf("%s missing", p.Name)
		}
		b := raw[h.DataOffset+tensor.Begin : h.DataOffset+tensor.End]
		want := make([]float32, len(b)/4)
		must(t, init(p.Name, 0, want))
		for i := range want {
			got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			if got != want[i] {
				t.Fatalf("%s[%d] = %v, want %v", p.Name, i, got, want[i])
			}
			m.W[p.Name] = append(m.W[p.Name], float64(got))
		}
	}
	c, err := readCorpus(dir, o.shape.Vocab)
	must(t, err)
	l := data.Loader{Tokens: c.train, Seq: o.shape.Seq, Batch: o.batch, World: 1, MicroBatches: 1, Seed: o.seed}
	in, tg := make([]int32, o.batch*o.shape.Seq), make([]int32, o.batch*o.shape.Seq)
	l.MicroBatch(in, tg, 0, 0, 0)
	a, err := m.Forward(in, tg, o.batch, o.shape.Seq)
	must(t, err)
	if got := h.Metadata["reference_loss"]; got != strconv.FormatFloat(a.Loss, 'g', 17, 64) {
		t.Fatalf("reference loss %s, recomputed %v", got, a.Loss)
	}
}

// TestExportNoCheck exports without the reference loss: the weights are
// written, the metadata has no reference_loss (the PyTorch --check then
// refuses the file).
func TestExportNoCheck(t *testing.T) {
	dir := writeData(t)
	path := filepath.Join(t.TempDir(), "init.safetensors")
	var out bytes.Buffer
	if code := run(append(append([]string{}, tinyFlags...), "-data", dir, "-export-init", path, "-export-check=false"), &out, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	st, _ := f.Stat()
	h, _, err := safetensors.Read(f, st.Size())
	must(t, err)
	o, err := parseFlags(tinyFlags)
	must(t, err)
	if _, ok := h.Metadata["reference_loss"]; ok || h.Metadata["batch"] != "2" || len(h.Tensors) != len(o.shape.Params()) {
		t.Fatalf("metadata %v, %d tensors", h.Metadata, len(h.Tensors))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSkipped: a skipped step stops the run with the optimizer's reason.
func TestSkipped(t *testing.T) {
	if err := skipped(optimizer.StepResult{Step: 3, GradNorm: 1}); err != nil {
		t.Errorf("a step taken: %v", err)
	}
	err := skipped(optimizer.StepResult{Step: 3, Skipped: true, Reason: "2 non-finite gradient values"})
	if err == nil || !strings.Contains(err.Error(), "2 non-finite gradient values") {
		t.Errorf("a skipped step: %v", err)
	}
}

// TestResumeOtherMoments resumes a checkpoint written with -moments fp32
// (the default before 2026-12-05) with the default moments: the run must
// stop with checkpoint.ErrMomentType and name -moments; with -moments fp32
// it resumes.
func TestResumeOtherMoments(t *testing.T) {
	dir, ck := writeData(t), t.TempDir()
	common := []string{"-data", dir, "-steps", "4", "-sample", "0", "-ckpt", ck}
	trainFlags(t, append(common, "-moments", "fp32", "-stop-after", "2")...)
	o, err := parseFlags(append(append([]string{}, tinyFlags...), append(common, "-resume")...))
	must(t, err)
	_, err = train(o, io.Discard)
	if !errors.Is(err, checkpoint.ErrMomentType) || !strings.Contains(err.Error(), "-moments") {
		t.Fatalf("resuming fp32 moments with the default: %v; want checkpoint.ErrMomentType naming -moments", err)
	}
	if got := trainFlags(t, append(common, "-moments", "fp32", "-resume")...); len(got) != 2 {
		t.Fatalf("resumed with -moments fp32: %d losses, want 2", len(got))
	}
}

// TestResumeOtherWorld stops a run of two ranks and resumes it on one rank
// with two micro-batches (the same sequences per step: the loader numbers a
// step's micro-batches rank-major). The first step after the resume sees
// the same parameters, so its loss (the mean of the same two micro-batch
// losses) must equal the uninterrupted run's bit for bit; afterwards the
// gradients are summed in another order (accumulated on one rank instead of
// reduce-scattered over two), so the losses may part in the last bits only.
func TestResumeOtherWorld(t *testing.T) {
	dir := writeData(t)
	common := []string{"-data", dir, "-steps", "8", "-sample", "0"}
	full := trainFlags(t, append(common, "-ranks", "2")...)
	ck := t.TempDir()
	first := trainFlags(t, append(common, "-ranks", "2", "-ckpt", ck, "-stop-after", "4")...)
	rest := trainFlags(t, append(common, "-ranks", "1", "-micro", "2", "-ckpt", ck, "-resume")...)
	got := append(first, rest...)
	if len(got) != len(full) {
		t.Fatalf("%d losses stopped and resumed, %d uninterrupted", len(got), len(full))
	}
	for i := range 5 {
		if got[i] != full[i] {
			t.Fatalf("step %d: loss %v (resumed on one rank after step 4), %v uninterrupted: want equal bits up to step 5", i+1, got[i], full[i])
		}
	}
	for i := 5; i < len(full); i++ {
		if d := math.Abs(got[i]-full[i]) / full[i]; d > 1e-4 {
			t.Errorf("step %d: loss %v resumed on one rank, %v uninterrupted (%.2g apart)", i+1, got[i], full[i], d)
		}
	}
}
