package curve

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// SeedRow is the verdict on one configuration trained with several seeds
// (batch orders), each seed's run compared with the reference trained
// from the same initial weights on the same batches. One run's distance
// from the reference mixes the configuration's effect with the
// trajectories' spread (at examples/gpt's 124M gate, about 1% at step
// 2000 between seeds); the mean of the signed differences over seeds
// keeps the effect and shrinks the spread.
type SeedRow struct {
	Name      string
	Seeds     int
	FinalStep int
	// Finals are each seed's signed relative difference (run - ref) / ref
	// at FinalStep, in the order of the seeds; Mean their mean, SD their
	// sample standard deviation and SE the mean's standard error SD/√n (0
	// with one seed). Mean ± 2 SE is roughly where the configuration's
	// own difference lies: the gate passes on the mean, and SE says how
	// far that is known.
	Finals       []float64
	Mean, SD, SE float64
	// WorstStep is the evaluation after Warmup whose mean difference over
	// the seeds is largest in magnitude, WorstMean that mean (signed).
	WorstStep int
	WorstMean float64
	Evals     int // evaluations after Warmup compared
	OK        bool
	// Problem says why not OK. A row whose runs could not all be compared
	// (Compared false) has no statistics: its Finals hold the seeds
	// compared before the one that failed.
	Problem  string
	Compared bool
}

// CheckSeeds applies c to the mean over seeds of each configuration's
// signed differences from the references: runs[i][k] is configuration
// i's run with the seed of refs[k]. A configuration misses when the
// magnitude of its mean difference at the last evaluation (c.Steps, or the
// first reference's last) exceeds c.Final, or at any evaluation after
// c.Warmup exceeds c.Every; and when one of its runs cannot be compared
// with its reference (as Check finds: an evaluation missing, other
// validation sequences; or a loss that is NaN). Seeds are named by their
// position in the lists, from 1.
func CheckSeeds(refs []Curve, runs [][]Curve, c Criteria) ([]SeedRow, error) {
	if len(refs) == 0 {
		return nil, fmt.Errorf("curve: no reference runs")
	}
	if c.Steps == 0 && len(refs[0].Valid) > 0 {
		c.Steps = refs[0].Valid[len(refs[0].Valid)-1].Step
	}
	var steps []int // the first reference's evaluations compared
	for _, p := range refs[0].Valid {
		if p.Step > c.Warmup && p.Step <= c.Steps {
			steps = append(steps, p.Step)
		}
	}
	if len(steps) == 0 || steps[len(steps)-1] != c.Steps {
		return nil, fmt.Errorf("curve: the reference %s has no validation loss at step %d", refs[0].Name, c.Steps)
	}
	rows := make([]SeedRow, 0, len(runs))
	for i, rs := range runs {
		if len(rs) != len(refs) {
			return nil, fmt.Errorf("curve: configuration %d has %d runs for %d seeds (one run per reference, in the references' order)", i+1, len(rs), len(refs))
		}
		rows = append(rows, checkSeeds(refs, rs, steps, c))
	}
	return rows, nil
}

func checkSeeds(refs, runs []Curve, steps []int, c Criteria) SeedRow {
	row := SeedRow{Name: runs[0].Name, Seeds: len(runs), FinalStep: c.Steps, Evals: len(steps)}
	sum := make([]float64, len(steps))
	structural := Criteria{Final: math.Inf(1), Every: math.Inf(1), Warmup: c.Warmup, Steps: c.Steps}
	for k, run := range runs {
		if r := check(refs[k], run, structural); !r.OK {
			if r.Evals > 0 && math.IsNaN(r.WorstRel) {
				r.Problem = fmt.Sprintf("the validation loss at step %d is not a number (the run's or the reference's)", r.WorstStep)
			}
			row.Problem = fmt.Sprintf("seed %d of the lists (%s against %s): %s", k+1, run.Name, refs[k].Name, r.Problem)
			return row
		}
		d := map[int]float64{}
		for _, p := range Differences(refs[k], run) {
			d[p.Step] = p.Loss
		}
		for j, s := range steps {
			v, ok := d[s]
			if !ok {
				row.Problem = fmt.Sprintf("seed %d of the lists: its reference %s has no validation loss at step %d (the first reference has one)", k+1, refs[k].Name, s)
				return row
			}
			sum[j] += v
		}
		row.Finals = append(row.Finals, d[c.Steps])
	}
	row.Compared = true
	n := float64(len(runs))
	for j, s := range steps {
		m := sum[j] / n
		if j == 0 || math.Abs(m) > math.Abs(row.WorstMean) {
			row.WorstMean, row.WorstStep = m, s
		}
	}
	row.Mean, row.SD = meanSD(row.Finals)
	row.SE = row.SD / math.Sqrt(n)
	switch {
	case !(math.Abs(row.Mean) <= c.Final):
		row.Problem = fmt.Sprintf("mean final difference over %d seeds is %+.2f%% (at most %.2f%%)", len(runs), 100*row.Mean, 100*c.Final)
	case !(math.Abs(row.WorstMean) <= c.Every):
		row.Problem = fmt.Sprintf("mean difference at step %d is %+.2f%% (at most %.2f%%)", row.WorstStep, 100*row.WorstMean, 100*c.Every)
	default:
		row.OK = true
	}
	return row
}

// SeedSpread is the references' own spread over the seeds: the mean and
// sample standard deviation of their validation losses at step, the
// yardstick for the rows' per-seed differences.
func SeedSpread(refs []Curve, step int) (mean, sd float64, err error) {
	var v []float64
	for _, r := range refs {
		found := false
		for _, p := range r.Valid {
			if p.Step == step {
				v, found = append(v, p.Loss), true
			}
		}
		if !found {
			return 0, 0, fmt.Errorf("curve: the reference %s has no validation loss at step %d", r.Name, step)
		}
	}
	mean, sd = meanSD(v)
	return mean, sd, nil
}

// meanSD returns the mean of v (not empty) and its sample standard
// deviation (0 for one value).
func meanSD(v []float64) (mean, sd float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) > 1 {
		for _, x := range v {
			sd += (x - mean) * (x - mean)
		}
		sd = math.Sqrt(sd / float64(len(v)-1))
	}
	return mean, sd
}

// WriteSeedTable prints the rows: each configuration's per-seed final
// differences, their mean, standard deviation and standard error, and the
// verdict; "-" where a row has no statistics.
func WriteSeedTable(w io.Writer, ref string, rows []SeedRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\tseeds\tstep\tdiff from %s per seed\tmean\tsd\tse\tworst mean (step)\tverdict\n", ref)
	for _, r := range rows {
		per := make([]string, len(r.Finals))
		for k, f := range r.Finals {
			per[k] = fmt.Sprintf("%+.2f%%", 100*f)
		}
		verdict := "pass"
		if !r.OK {
			verdict = "FAIL: " + r.Problem
		}
		stats := "-\t-\t-\t-"
		if r.Compared {
			stats = fmt.Sprintf("%+.2f%%\t%.2f%%\t%.2f%%\t%+.2f%% (%d)", 100*r.Mean, 100*r.SD, 100*r.SE, 100*r.WorstMean, r.WorstStep)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", r.Name, r.Seeds, r.FinalStep, strings.Join(per, " "), stats, verdict)
	}
	return tw.Flush()
}
