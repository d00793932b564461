package curve

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// seedCurves builds, for each offset e[k], a reference with seed k's own
// losses (refLoss shifted by 0.01·k, so that no two seeds agree) and a run
// of its losses times 1 + e[k] at every evaluation.
func seedCurves(name string, e []float64) (refs, runs []Curve) {
	for k, ek := range e {
		f := func(s int) float64 { return refLoss(s) + 0.01*float64(k) }
		refs = append(refs, Curve{Name: "torch", Valid: valid(20, 100, f)})
		runs = append(runs, Curve{Name: name, Valid: valid(20, 100, func(s int) float64 { return f(s) * (1 + ek) })})
	}
	return refs, runs
}

// TestCheckSeeds checks the gate over seeds against the closed form: runs
// offset by e[k] from their own seed's reference at every evaluation have
// the per-seed differences e, their mean and sample standard deviation,
// and pass or miss by the mean alone.
func TestCheckSeeds(t *testing.T) {
	c := Criteria{Final: 0.01, Every: 0.02, Warmup: 100}
	cases := []struct {
		name    string
		e       []float64
		ok      bool
		problem string
	}{
		{"spread, mean 0.2%", []float64{0.015, -0.012, 0.003}, true, ""},
		{"one seed", []float64{0.004}, true, ""},
		{"mean 1.5%", []float64{0.02, 0.01, 0.015}, false, "mean final difference over 3 seeds is +1.50%"},
		{"mean -2.5%", []float64{-0.03, -0.02}, false, "mean final difference over 2 seeds is -2.50%"},
	}
	for _, tc := range cases {
		refs, runs := seedCurves(tc.name, tc.e)
		rows, err := CheckSeeds(refs, [][]Curve{runs}, c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := rows[0]
		mean := 0.0
		for _, v := range tc.e {
			mean += v
		}
		mean /= float64(len(tc.e))
		sd := 0.0
		if len(tc.e) > 1 {
			for _, v := range tc.e {
				sd += (v - mean) * (v - mean)
			}
			sd = math.Sqrt(sd / float64(len(tc.e)-1))
		}
		if r.OK != tc.ok || !strings.Contains(r.Problem, tc.problem) {
			t.Errorf("%s: ok %v, problem %q; want %v, %q", tc.name, r.OK, r.Problem, tc.ok, tc.problem)
		}
		if r.Seeds != len(tc.e) || r.FinalStep != 2000 || r.Evals != 19 || len(r.Finals) != len(tc.e) {
			t.Fatalf("%s: %d seeds, step %d, %d evaluations, %d finals; want %d, 2000, 19, %d", tc.name, r.Seeds, r.FinalStep, r.Evals, len(r.Finals), len(tc.e), len(tc.e))
		}
		for k, f := range r.Finals {
			if math.Abs(f-tc.e[k]) > 1e-12 {
				t.Errorf("%s: seed %d's final difference %g, want %g", tc.name, k+1, f, tc.e[k])
			}
		}
		se := sd / math.Sqrt(float64(len(tc.e)))
		if math.Abs(r.Mean-mean) > 1e-12 || math.Abs(r.SD-sd) > 1e-12 || math.Abs(r.SE-se) > 1e-12 || math.Abs(r.WorstMean-mean) > 1e-12 || !r.Compared {
			t.Errorf("%s: mean %g, sd %g, se %g, worst mean %g, compared %v; want %g, %g, %g, %g, true", tc.name, r.Mean, r.SD, r.SE, r.WorstMean, r.Compared, mean, sd, se, mean)
		}
	}
}

// TestCheckSeedsEvery checks the bound on every evaluation's mean, and
// that an evaluation in warm-up is not compared.
func TestCheckSeedsEvery(t *testing.T) {
	c := Criteria{Final: 0.01, Every: 0.02, Warmup: 100}
	refs, runs := seedCurves("bump", []float64{0, 0})
	for k := range runs {
		for i := range runs[k].Valid {
			switch runs[k].Valid[i].Step {
			case 100: // warm-up
				runs[k].Valid[i].Loss *= 1.5
			case 600: // mean 2.5%, each seed 5% and 0%
				if k == 0 {
					runs[k].Valid[i].Loss = refs[k].Valid[i].Loss * 1.05
				}
			}
		}
	}
	rows, err := CheckSeeds(refs, [][]Curve{runs}, c)
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[0]; r.OK || r.WorstStep != 600 || math.Abs(r.WorstMean-0.025) > 1e-12 || !strings.Contains(r.Problem, "step 600") {
		t.Errorf("got ok %v, worst %+g at %d, %q; want a miss at step 600 of +0.025", r.OK, r.WorstMean, r.WorstStep, r.Problem)
	}
}

// TestCheckSeedsRefuses checks the errors and problems that name what
// cannot be compared: lists of other lengths, a seed's run missing an
// evaluation, a seed validated on other sequences, a NaN loss.
func TestCheckSeedsRefuses(t *testing.T) {
	c := Criteria{Final: 0.01, Every: 0.02, Warmup: 100}
	refs, runs := seedCurves("x", []float64{0, 0, 0})
	if _, err := CheckSeeds(refs, [][]Curve{runs[:2]}, c); err == nil || !strings.Contains(err.Error(), "2 runs for 3 seeds") {
		t.Errorf("two runs for three seeds: %v", err)
	}
	if _, err := CheckSeeds(nil, [][]Curve{runs}, c); err == nil {
		t.Error("no references: no error")
	}
	if _, err := CheckSeeds(refs, [][]Curve{runs}, Criteria{Final: 0.01, Every: 0.02, Steps: 2100}); err == nil || !strings.Contains(err.Error(), "step 2100") {
		t.Errorf("a final step the reference lacks: %v", err)
	}
	short := append([]Curve(nil), runs...)
	short[1].Valid = short[1].Valid[:10]
	nan := append([]Curve(nil), runs...)
	nan[2].Valid = append([]Point(nil), runs[2].Valid...)
	nan[2].Valid[5].Loss = math.NaN()
	other := append([]Curve(nil), runs...)
	other[0].Eval = &Eval{Windows: 64, Spread: true}
	otherRefs := append([]Curve(nil), refs...)
	otherRefs[0].Eval = &Eval{Windows: 32, Spread: true}
	// seed 2's reference (and its run) evaluated every 200 steps, the
	// first every 100
	sparse := append([]Curve(nil), refs...)
	sparseRuns := append([]Curve(nil), runs...)
	sparse[1].Valid, sparseRuns[1].Valid = nil, nil
	for i, p := range refs[1].Valid {
		if p.Step%200 == 0 {
			sparse[1].Valid = append(sparse[1].Valid, p)
			sparseRuns[1].Valid = append(sparseRuns[1].Valid, runs[1].Valid[i])
		}
	}
	for _, tc := range []struct {
		name    string
		refs    []Curve
		runs    []Curve
		problem string
	}{
		{"short", refs, short, "seed 2"},
		{"NaN", refs, nan, "seed 3 of the lists (x against torch): the validation loss at step 600 is not a number"},
		{"other sequences", otherRefs, other, "not the same sequences"},
		{"other steps", sparse, sparseRuns, "seed 2 of the lists: its reference torch has no validation loss at step 300"},
	} {
		rows, err := CheckSeeds(tc.refs, [][]Curve{tc.runs}, c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rows[0].OK || rows[0].Compared || !strings.Contains(rows[0].Problem, tc.problem) {
			t.Errorf("%s: ok %v, compared %v, %q; want a problem naming %q", tc.name, rows[0].OK, rows[0].Compared, rows[0].Problem, tc.problem)
		}
		var b strings.Builder
		if err := WriteSeedTable(&b, "torch", rows); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`-\s+-\s+-\s+-\s+FAIL`).MatchString(b.String()) {
			t.Errorf("%s: the table of a row without statistics:\n%s", tc.name, b.String())
		}
	}
}

// TestSeedSpread checks the references' spread against its closed form,
// and the table and picture of the gate.
func TestSeedSpread(t *testing.T) {
	refs, runs := seedCurves("tile", []float64{0.01, -0.02, 0.004})
	mean, sd, err := SeedSpread(refs, 2000)
	base := refLoss(2000)
	if err != nil || math.Abs(mean-(base+0.01)) > 1e-12 || math.Abs(sd-0.01) > 1e-12 {
		t.Errorf("spread: mean %g, sd %g, %v; want %g, 0.01", mean, sd, err, base+0.01)
	}
	if _, _, err := SeedSpread(refs, 2050); err == nil {
		t.Error("a step no reference has: no error")
	}
	c := Criteria{Final: 0.01, Every: 0.02, Warmup: 100}
	rows, err := CheckSeeds(refs, [][]Curve{runs}, c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteSeedTable(&b, "torch", rows); err != nil {
		t.Fatal(err)
	}
	// sd of {1, -2, 0.4}% is 1.587%, se 0.916%
	for _, want := range []string{"+1.00% -2.00% +0.40%", "-0.20%", "1.59%", "0.92%", "pass"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	path := filepath.Join(t.TempDir(), "d.png")
	if err := PlotSeedsDiff(path, "seeds", refs, [][]Curve{runs}, c); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("the picture is not a PNG: %v", err)
	}
	if err := PlotSeedsDiff(path, "seeds", refs, [][]Curve{runs[:1]}, c); err == nil {
		t.Error("one run for three seeds: no error")
	}
}
