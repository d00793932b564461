package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/gpt/curve"
)

// TestRun compares runs given as JSON and as a log with a reference, and
// checks a resumed run, through the command's exit codes and output.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	ref := curve.Curve{Name: "torch", Train: []curve.Point{{Step: 1, Loss: 5}, {Step: 2, Loss: 4}}, Valid: []curve.Point{{Step: 1, Loss: 4.5}, {Step: 2, Loss: 4}}}
	write := func(name string, c curve.Curve) string {
		p := filepath.Join(dir, name)
		if err := curve.Write(p, c); err != nil {
			t.Fatal(err)
		}
		return p
	}
	refPath := write("torch.json", ref)
	good := write("good.json", ref)
	logPath := filepath.Join(dir, "far.log")
	os.WriteFile(logPath, []byte("step     1/2  loss 5.0000\nstep     1  validation loss 4.5000\nstep     2/2  loss 4.0000\nstep     2  validation loss 4.2000\n"), 0o644)
	png := filepath.Join(dir, "c.png")
	var out, errOut bytes.Buffer
	if code := run([]string{"-ref", refPath, "-png", png, good}, &out, &errOut); code != 0 {
		t.Fatalf("equal curves: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if _, err := os.Stat(png); err != nil {
		t.Error(err)
	}
	out.Reset()
	if code := run([]string{"-ref", refPath, good, logPath}, &out, &errOut); code != 1 || !strings.Contains(out.String(), "far") || !strings.Contains(errOut.String(), "1 of 2 runs") {
		t.Errorf("5%% off at the end: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	first := write("first.json", curve.Curve{Train: ref.Train[:1], Valid: ref.Valid[:1]})
	rest := write("rest.json", curve.Curve{Train: ref.Train[1:], Valid: ref.Valid[1:]})
	if code := run([]string{"-resume", refPath, first, rest}, &out, &errOut); code != 0 {
		t.Errorf("resume: exit %d: %s", code, errOut.String())
	}
	if code := run([]string{"-resume", refPath, first}, &out, &errOut); code != 1 {
		t.Errorf("resume with a part missing: exit %d", code)
	}
	if code := run([]string{good}, &out, &errOut); code != 1 {
		t.Errorf("no -ref: exit %d", code)
	}
}

// TestSpeed compares a run with the fastest of three references given as a
// comma-separated list, and checks the JSON report against the table.
func TestSpeed(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, tokens float64) string {
		p := filepath.Join(dir, name+".json")
		c := curve.Curve{Name: name, Speed: &curve.Speed{TokensPerS: tokens, MFU: tokens / 1e6, PeakAllocBytes: 1 << 30, PeakUsedBytes: 2 << 30}}
		if err := curve.Write(p, c); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run1, flash, cudnn, auto := write("distopt", 500e3), write("flash", 400e3), write("cudnn", 625e3), write("auto", 560e3)
	jsonPath := filepath.Join(dir, "speed.json")
	var out, errOut bytes.Buffer
	if code := run([]string{"-speed", "-json", jsonPath, "-commit", "c0ffee", run1, flash + "," + cudnn + "," + auto}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "distopt / cudnn") || !strings.Contains(out.String(), "0.800x") {
		t.Errorf("table:\n%s", out.String())
	}
	rep, err := curve.ReadSpeedReport(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Commit != "c0ffee" || len(rep.Rows) != 1 || rep.Rows[0].Reference != "cudnn" || rep.Rows[0].Tokens != 0.8 || len(rep.Rows[0].Others) != 2 {
		t.Errorf("report %+v", rep)
	}
	if code := run([]string{"-speed", run1}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "pairs") {
		t.Errorf("a run without reference: exit %d: %s", code, errOut.String())
	}
}

// TestSeeds runs the gate over seeds: two seeds whose runs are 1.5% high
// and 1.1% low (each alone would miss the final 1%) pass in the mean
// (+0.2%); a configuration 1.5% high on both misses, and a list of the
// wrong length is refused.
func TestSeeds(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, loss float64) string {
		p := filepath.Join(dir, name+".json")
		c := curve.Curve{Name: name, Valid: []curve.Point{{Step: 100, Loss: 2 * loss}, {Step: 200, Loss: loss}}}
		if err := curve.Write(p, c); err != nil {
			t.Fatal(err)
		}
		return p
	}
	refs := write("torch1", 1) + "," + write("torch2", 1.2)
	mixed := write("mixed1", 1.015) + "," + write("mixed2", 1.2*0.989)
	high := write("high1", 1.015) + "," + write("high2", 1.2*1.015)
	diff := filepath.Join(dir, "d.png")
	var out, errOut bytes.Buffer
	if code := run([]string{"-seeds", "-ref", refs, "-diff-png", diff, mixed}, &out, &errOut); code != 0 {
		t.Fatalf("mixed: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "+1.50% -1.10%") || !strings.Contains(out.String(), "+0.20%") || !strings.Contains(out.String(), "over 2 seeds") {
		t.Errorf("table:\n%s", out.String())
	}
	if _, err := os.Stat(diff); err != nil {
		t.Error(err)
	}
	out.Reset()
	if code := run([]string{"-seeds", "-ref", refs, mixed, high}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "1 of 2 configurations") {
		t.Errorf("high: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"-seeds", "-ref", refs, write("one", 1)}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "1 runs for 2 seeds") {
		t.Errorf("one run for two seeds: exit %d: %s", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"-seeds", "-ref", refs, "-png", diff, mixed}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "-diff-png") {
		t.Errorf("-png with -seeds: exit %d: %s", code, errOut.String())
	}
}
