package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/internal/safetensors"
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
	o, err := parseFlags(append(append([]string{}, tinyFlags...), args...), &bytes.Buffer{})
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
// checkpoint gives the losses of the uninterrupted run bit for bit.
func TestResume(t *testing.T) {
	dir := writeData(t)
	common := []string{"-data", dir, "-ranks", "2", "-steps", "6", "-sample", "0"}
	full := trainFlags(t, append(common, "-ckpt", t.TempDir())...)
	ck := t.TempDir()
	first := trainFlags(t, append(common, "-ckpt", ck, "-stop-after", "3")...)
	rest := trainFlags(t, append(common, "-ckpt", ck, "-resume")...)
	got := append(first, rest...)
	if len(got) != len(full) {
		t.Fatalf("%d losses stopped and resumed, %d uninterrupted", len(got), len(full))
	}
	for i := range full {
		if got[i] != full[i] {
			t.Fatalf("step %d: loss %v after resuming, %v uninterrupted", i+1, got[i], full[i])
		}
	}
}

// TestFlags checks that bad flags are refused with a message.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-preset", "huge"}, {"-backend", "tpu"}, {"-heads", "5"}, {"-ranks", "0"}, {"-resume"}, {"-recipe", "nope"}, {"extra"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
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
	o, err := parseFlags(append(append([]string{}, tinyFlags...), "-data", dir, "-export-init", path), &bytes.Buffer{})
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

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
