package curve

import (
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// valid builds validation points at steps every, 2*every, ... n*every with
// the losses f(step).
func valid(n, every int, f func(step int) float64) []Point {
	ps := make([]Point, n)
	for i := range ps {
		ps[i] = Point{Step: (i + 1) * every, Loss: f((i + 1) * every)}
	}
	return ps
}

func refLoss(step int) float64 { return 1 + 4/float64(step) }

func TestCheck(t *testing.T) {
	ref := Curve{Name: "torch", Valid: valid(20, 100, refLoss)}
	c := Criteria{Final: 0.01, Every: 0.02, Warmup: 100, Steps: 2000}
	scaled := func(name string, f func(step int) float64) Curve {
		return Curve{Name: name, Valid: valid(20, 100, f)}
	}
	cases := []struct {
		run     Curve
		ok      bool
		problem string
	}{
		{scaled("same", refLoss), true, ""},
		{scaled("0.9% high", func(s int) float64 { return refLoss(s) * 1.009 }), true, ""},
		{scaled("final 1.1% low", func(s int) float64 {
			if s == 2000 {
				return refLoss(s) * 0.989
			}
			return refLoss(s)
		}), false, "final validation loss"},
		{scaled("2.1% at step 500", func(s int) float64 {
			if s == 500 {
				return refLoss(s) * 1.021
			}
			return refLoss(s)
		}), false, "at step 500"},
		{scaled("10% in warm-up", func(s int) float64 {
			if s <= 100 {
				return refLoss(s) * 1.1
			}
			return refLoss(s)
		}), true, ""},
		{scaled("NaN", func(s int) float64 {
			if s == 700 {
				return math.NaN()
			}
			return refLoss(s)
		}), false, "at step 700"},
		{Curve{Name: "stopped", Valid: valid(12, 100, refLoss)}, false, "no validation loss at step 1300"},
	}
	for _, tc := range cases {
		row := Check(ref, []Curve{tc.run}, c)[0]
		if row.OK != tc.ok || !strings.Contains(row.Problem, tc.problem) {
			t.Errorf("%s: OK %v (%s), want %v (%q)", tc.run.Name, row.OK, row.Problem, tc.ok, tc.problem)
		}
	}
	row := Check(ref, []Curve{scaled("1.5% high", func(s int) float64 { return refLoss(s) * 1.015 })}, Criteria{Final: 0.01, Every: 0.02, Warmup: 100})[0]
	if row.OK || row.FinalStep != 2000 || math.Abs(row.FinalRel-0.015) > 1e-12 || row.Evals != 19 {
		t.Errorf("1.5%% high at the end: %+v", row)
	}
	// Runs validated on other sequences are refused when both record
	// theirs; a run (or reference) from before the record is compared.
	spread, first := &Eval{Windows: 192, Spread: true}, &Eval{Windows: 192}
	for _, e := range []struct {
		ref, run *Eval
		ok       bool
	}{{spread, spread, true}, {spread, first, false}, {spread, &Eval{Windows: 96, Spread: true}, false}, {nil, first, true}, {spread, nil, true}} {
		r, run := ref, scaled("same", refLoss)
		r.Eval, run.Eval = e.ref, e.run
		if row := Check(r, []Curve{run}, c)[0]; row.OK != e.ok || (!e.ok && !strings.Contains(row.Problem, "not the same sequences")) {
			t.Errorf("reference validated on %+v, run on %+v: OK %v (%s), want %v", e.ref, e.run, row.OK, row.Problem, e.ok)
		}
	}
	short := Curve{Name: "torch", Valid: valid(12, 100, refLoss)}
	if row := Check(short, []Curve{scaled("same", refLoss)}, c)[0]; row.OK || !strings.Contains(row.Problem, "reference has no validation loss at step 2000") {
		t.Errorf("reference stopped at 1200 accepted: %+v", row)
	}
}

func TestResume(t *testing.T) {
	train := make([]Point, 60)
	for i := range train {
		train[i] = Point{Step: i + 1, Loss: 5 / math.Sqrt(float64(i+1))}
	}
	full := Curve{Name: "full", Train: train, Valid: []Point{{30, 2.5}, {60, 2}}}
	first := Curve{Train: train[:30], Valid: []Point{{30, 2.5}}}
	rest := Curve{Train: append([]Point(nil), train[30:]...), Valid: []Point{{60, 2}}}
	if n, err := Resume(full, first, rest); err != nil || n != 60 {
		t.Fatalf("equal runs: %d, %v", n, err)
	}
	rest.Train[5].Loss = math.Nextafter(rest.Train[5].Loss, 0)
	if _, err := Resume(full, first, rest); err == nil || !strings.Contains(err.Error(), "step 36") {
		t.Errorf("one ulp off at step 36: %v", err)
	}
	rest.Train[5].Loss = train[35].Loss
	if _, err := Resume(full, first, Curve{Train: rest.Train[1:]}); err == nil {
		t.Error("a missing step accepted")
	}
	if _, err := Resume(full, first, Curve{Train: rest.Train, Valid: []Point{{60, 2.0000001}}}); err == nil {
		t.Error("a different validation loss accepted")
	}
}

// TestJSONRoundTrip writes and reads a curve: every loss must come back
// bit for bit (the resume check depends on it).
func TestJSONRoundTrip(t *testing.T) {
	c := Curve{Name: "x", Train: []Point{{1, 0.1 + 0.2}, {2, math.Nextafter(1, 2)}, {3, 5.545177444479562}},
		Valid: []Point{{3, 1e-300}}, Speed: &Speed{TokensPerS: 1.5e5, MFU: 0.25, PeakAllocBytes: 1 << 40},
		Eval: &Eval{Windows: 192, Spread: true}, Head: "bf16"}
	path := filepath.Join(t.TempDir(), "c.json")
	if err := Write(path, c); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range c.Train {
		if got.Train[i] != p {
			t.Errorf("train %d: %v, wrote %v", i, got.Train[i], p)
		}
	}
	if got.Valid[0] != c.Valid[0] || *got.Speed != *c.Speed || got.Name != "x" || got.Eval == nil || *got.Eval != *c.Eval || got.Head != "bf16" {
		t.Errorf("read %+v, wrote %+v", got, c)
	}
	// The reference writes the same layout from Python.
	py := filepath.Join(t.TempDir(), "torch.json")
	os.WriteFile(py, []byte(`{"train": [[1, 5.5], [2, 5.25]], "valid": [[2, 5.0]], "speed": {"tokens_per_s": 4e5, "mfu": 0.3, "peak_alloc_bytes": 123, "peak_used_bytes": 456}}`), 0o644)
	if got, err := Read(py); err != nil || len(got.Train) != 2 || got.Train[1] != (Point{2, 5.25}) || got.Speed.PeakUsedBytes != 456 || got.Name != "torch.json" {
		t.Errorf("Python's file: %+v, %v", got, err)
	}
	// and, since it records them, its validation sequences (older files
	// have none: Eval stays nil).
	os.WriteFile(py, []byte(`{"train": [[1, 5.5]], "valid": [], "eval": {"windows": 192, "spread": true}}`), 0o644)
	if got, err := Read(py); err != nil || got.Eval == nil || *got.Eval != (Eval{Windows: 192, Spread: true}) || got.Head != "" {
		t.Errorf("Python's file with its validation sequences: %+v, %v", got, err)
	}
	// A diverged run: non-finite losses survive the round trip (NaN as NaN).
	nf := Curve{Name: "nf", Train: []Point{{1, math.NaN()}, {2, math.Inf(1)}, {3, math.Inf(-1)}}}
	if err := Write(path, nf); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(path); err != nil || !math.IsNaN(got.Train[0].Loss) || !math.IsInf(got.Train[1].Loss, 1) || !math.IsInf(got.Train[2].Loss, -1) {
		t.Errorf("non-finite losses read back as %+v, %v", got, err)
	}
	os.WriteFile(py, []byte(`{"train": [[1, "NaN"], [2, "+Inf"]]}`), 0o644)
	if got, err := Read(py); err != nil || !math.IsNaN(got.Train[0].Loss) || !math.IsInf(got.Train[1].Loss, 1) {
		t.Errorf("Python's non-finite losses: %+v, %v", got, err)
	}
	for _, bad := range []string{`{"train": [[1.5, 2]]}`, `{"train": [[1]]}`, `{"train": [[2, 1], [2, 1]]}`, `{"valid": [[0, 1]]}`, `{"train": [[1, "nan"]]}`, `{"train": [["1", 2]]}`} {
		os.WriteFile(py, []byte(bad), 0o644)
		if _, err := Read(py); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestParseLog(t *testing.T) {
	log := `gpt on 1 GPU(s) (NVIDIA H200): 85M parameters
step     1/2000  loss 5.5452  lr 6.00e-06  grad norm 1.000  150000 tokens/s
step     2/2000  loss 5.4000  grad norm 0.900     400000 tokens/s
step     2  validation loss 5.3000 (7.646 bits per byte)
saved ckpt/step-2
step     3/2000  loss 5.2000
`
	c, err := ParseLog(strings.NewReader(log), "run")
	if err != nil {
		t.Fatal(err)
	}
	want := Curve{Train: []Point{{1, 5.5452}, {2, 5.4}, {3, 5.2}}, Valid: []Point{{2, 5.3}}}
	if len(c.Train) != 3 || len(c.Valid) != 1 || c.Valid[0] != want.Valid[0] {
		t.Fatalf("parsed %+v", c)
	}
	for i := range want.Train {
		if c.Train[i] != want.Train[i] {
			t.Errorf("train %d: %v, want %v", i, c.Train[i], want.Train[i])
		}
	}
	for _, bad := range []string{"step 3/9 loss x\n", "step 3/9 loss 1\nstep 2/9 loss 1\n"} {
		if _, err := ParseLog(strings.NewReader(bad), "bad"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestPlot draws two curves into a PNG and decodes it.
func TestPlot(t *testing.T) {
	train := make([]Point, 300)
	for i := range train {
		train[i] = Point{i + 1, refLoss(i + 1)}
	}
	path := filepath.Join(t.TempDir(), "c.png")
	err := Plot(path, "test", []Curve{{Name: "a", Train: train, Valid: valid(3, 100, refLoss)}, {Name: "b", Valid: valid(3, 100, refLoss)}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() <= b.Dy() || b.Dy() < 100 {
		t.Errorf("image %v: want a landscape picture", b)
	}
}

func TestMovingAverage(t *testing.T) {
	ps := []Point{{1, 1}, {2, 3}, {3, 5}, {4, 7}}
	got := movingAverage(ps, 2)
	for i, want := range []float64{1, 2, 4, 6} {
		if got[i].Y != want || got[i].X != float64(i+1) {
			t.Errorf("%d: %v, want (%d, %v)", i, got[i], i+1, want)
		}
	}
}

func TestWriteSpeed(t *testing.T) {
	a := Curve{Name: "distopt", Speed: &Speed{TokensPerS: 300, MFU: 0.3, PeakAllocBytes: 1 << 30, PeakUsedBytes: 3 << 30}}
	b := Curve{Name: "torch", Speed: &Speed{TokensPerS: 200, MFU: 0.2, PeakAllocBytes: 2 << 30, PeakUsedBytes: 4 << 30}}
	row, err := NewSpeedRow(a, []Curve{b})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := WriteSpeed(&out, []SpeedRow{row}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"distopt / torch", "1.500x", "0.500x", "0.750x", "30.0%", "1.00 GiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
	if _, err := NewSpeedRow(a, []Curve{{Name: "short"}}); err == nil || !strings.Contains(err.Error(), "short") {
		t.Errorf("a reference without speed: %v", err)
	}
	if _, err := NewSpeedRow(Curve{Name: "short"}, []Curve{b}); err == nil || !strings.Contains(err.Error(), "short") {
		t.Errorf("a run without speed: %v", err)
	}
	if _, err := NewSpeedRow(a, nil); err == nil {
		t.Error("no reference accepted")
	}
}

// TestSpeedReport checks that the fastest reference is chosen whatever its
// place, that the ratios are taken against it, and that the report file
// reads back equal.
func TestSpeedReport(t *testing.T) {
	run := Curve{Name: "distopt", Speed: &Speed{TokensPerS: 600, MFU: 0.6, PeakAllocBytes: 9, PeakUsedBytes: 10}}
	speeds := []float64{400, 500, 450}
	for first := range speeds {
		var refs []Curve
		for k := range speeds {
			s := speeds[(first+k)%len(speeds)]
			refs = append(refs, Curve{Name: fmt.Sprint("torch ", s), Speed: &Speed{TokensPerS: s, MFU: s / 1000, PeakAllocBytes: 10, PeakUsedBytes: 20}})
		}
		row, err := NewSpeedRow(run, refs)
		if err != nil {
			t.Fatal(err)
		}
		if row.Reference != "torch 500" || row.Tokens != 600.0/500 || row.MFU != 0.6/0.5 || row.PeakAlloc != 0.9 || len(row.Others) != 2 || row.Others["torch 400"] != 400 {
			t.Fatalf("rotation %d: %+v", first, row)
		}
	}
	row, _ := NewSpeedRow(run, []Curve{{Name: "torch", Speed: &Speed{TokensPerS: 300, MFU: 0.3, PeakAllocBytes: 18}}})
	path := filepath.Join(t.TempDir(), "speed.json")
	rep := SpeedReport{Commit: "abc123", Machine: "one H200", Rows: []SpeedRow{row}}
	if err := rep.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSpeedReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Date == "" || got.Commit != "abc123" || len(got.Rows) != 1 || got.Rows[0].Tokens != 2 || got.Rows[0].PeakAlloc != 0.5 || got.Rows[0].RefSpeed != row.RefSpeed {
		t.Fatalf("read back %+v", got)
	}
}

func TestDifferences(t *testing.T) {
	ref := Curve{Name: "ref", Valid: []Point{{100, 2}, {200, 1.6}, {300, 1.25}}}
	run := Curve{Name: "run", Valid: []Point{{100, 2.5}, {300, 1}, {400, 0.5}}}
	got := Differences(ref, run)
	want := []Point{{100, 0.25}, {300, -0.2}} // step 200 missing from run, 400 from ref
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i].Step != want[i].Step || math.Abs(got[i].Loss-want[i].Loss) > 1e-15 {
			t.Errorf("%d: %v, want %v", i, got[i], want[i])
		}
	}
	path := filepath.Join(t.TempDir(), "d.png")
	c := Criteria{Final: 0.01, Every: 0.02, Warmup: 50}
	if err := PlotDiff(path, "test", ref, []Curve{run}, c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	c.Warmup = 300 // nothing after the warm-up: refused, naming the run
	if err := PlotDiff(path, "test", ref, []Curve{run}, c); err == nil || !strings.Contains(err.Error(), "run has no validation loss") {
		t.Errorf("no point after the warm-up: %v, want an error naming the run", err)
	}
}
