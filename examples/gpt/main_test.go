package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/gpt/data"
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
		{"-preset", "huge"}, {"-heads", "5"}, {"-ranks", "0"}, {"-backend", "gpu"}, {"-resume"}, {"-recipe", "nope"}, {"extra"},
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
