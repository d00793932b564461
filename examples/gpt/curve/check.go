package curve

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// Criteria are the loss criteria of issue 16 on the validation losses of
// a run against the reference's at the same steps.
type Criteria struct {
	// Final is the largest relative difference allowed at the last
	// evaluation (0.01), Every at every evaluation after Warmup steps
	// (0.02).
	Final, Every float64
	Warmup       int
	// Steps is the step of the last evaluation both runs must reach
	// (0: the reference's last).
	Steps int
}

// Row is the verdict on one run.
type Row struct {
	Name string
	// FinalStep is the last evaluation's step, Final and Ref the run's and
	// the reference's validation losses there, FinalRel their relative
	// difference |Final-Ref|/Ref.
	FinalStep       int
	Final, Ref      float64
	FinalRel        float64
	WorstStep       int     // the evaluation after Warmup with the largest difference
	WorstRel        float64 // its relative difference
	Evals           int     // evaluations after Warmup compared
	OK              bool
	Problem         string // why not OK
	TokensPerS, MFU float64
}

// Check compares each run's validation losses with the reference's at
// every step the reference evaluated after c.Warmup: a run misses the
// criteria when an evaluation is missing, when one differs by more than
// c.Every, or when the last (at c.Steps) differs by more than c.Final; and
// when both record their validation sequences (Curve.Eval) and these
// differ.
func Check(ref Curve, runs []Curve, c Criteria) []Row {
	rows := make([]Row, 0, len(runs))
	for _, r := range runs {
		rows = append(rows, check(ref, r, c))
	}
	return rows
}

func check(ref, run Curve, c Criteria) Row {
	row := Row{Name: run.Name, WorstRel: math.NaN(), FinalRel: math.NaN(), Final: math.NaN(), Ref: math.NaN()}
	if run.Speed != nil {
		row.TokensPerS, row.MFU = run.Speed.TokensPerS, run.Speed.MFU
	}
	steps := c.Steps
	if steps == 0 && len(ref.Valid) > 0 {
		steps = ref.Valid[len(ref.Valid)-1].Step
	}
	got := map[int]float64{}
	for _, p := range run.Valid {
		got[p.Step] = p.Loss
	}
	fail := func(format string, a ...any) Row {
		row.OK, row.Problem = false, fmt.Sprintf(format, a...)
		return row
	}
	if ref.Eval != nil && run.Eval != nil && *ref.Eval != *run.Eval {
		return fail("validated on %d sequences (spread %v), the reference on %d (spread %v): not the same sequences",
			run.Eval.Windows, run.Eval.Spread, ref.Eval.Windows, ref.Eval.Spread)
	}
	var last *Point
	for i := range ref.Valid {
		p := ref.Valid[i]
		if p.Step <= c.Warmup || p.Step > steps {
			continue
		}
		v, ok := got[p.Step]
		if !ok {
			return fail("no validation loss at step %d (the reference has one)", p.Step)
		}
		rel := math.Abs(v-p.Loss) / p.Loss
		row.Evals++
		if row.Evals == 1 || (!math.IsNaN(row.WorstRel) && !(rel <= row.WorstRel)) { // a NaN loss is the worst
			row.WorstRel, row.WorstStep = rel, p.Step
		}
		last = &ref.Valid[i]
	}
	if last == nil || last.Step != steps {
		return fail("the reference has no validation loss at step %d", steps)
	}
	row.FinalStep, row.Final, row.Ref = steps, got[steps], last.Loss
	row.FinalRel = math.Abs(row.Final-row.Ref) / row.Ref
	switch {
	case !(row.FinalRel <= c.Final):
		return fail("final validation loss %.4f is %.2f%% from the reference's %.4f (at most %.2f%%)",
			row.Final, 100*row.FinalRel, row.Ref, 100*c.Final)
	case !(row.WorstRel <= c.Every):
		return fail("validation loss at step %d is %.2f%% from the reference's (at most %.2f%%)", row.WorstStep, 100*row.WorstRel, 100*c.Every)
	}
	row.OK = true
	return row
}

// WriteTable prints the rows against the reference named ref.
func WriteTable(w io.Writer, ref string, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\tstep\tvalid loss\t%s\tdiff\tworst diff (step)\tevals\ttokens/s\tMFU\tverdict\n", ref)
	for _, r := range rows {
		verdict := "pass"
		if !r.OK {
			verdict = "FAIL: " + r.Problem
		}
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.2f%%\t%.2f%% (%d)\t%d\t%.0f\t%.1f%%\t%s\n",
			r.Name, r.FinalStep, r.Final, r.Ref, 100*r.FinalRel, 100*r.WorstRel, r.WorstStep, r.Evals, r.TokensPerS, 100*r.MFU, verdict)
	}
	return tw.Flush()
}
