package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/plan"
	"github.com/distopt/distopt/plan/barplot"
)

// stepOptions are the flags of `distopt plan -steptime`.
type stepOptions struct {
	cluster string  // h100, h200, or "calibration"
	tokens  int     // tokens per GPU and step, for the compute time
	mfu     float64 // fraction of the GPU's BF16 peak the forward and backward reach
	chart   string  // a .png or .svg file for the step chart
}

// flags adds the step-time flags to fs.
func (s *stepOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&s.cluster, "steptime", "", "print the predicted step time instead of the memory, on `CLUSTER`: h100 or h200 (nodes of 8 GPUs, 400 Gb/s per GPU), or calibration (the model against the 2x H200 measurements)")
	fs.IntVar(&s.tokens, "tokens", 16384, "tokens per GPU and step, for -steptime's compute time (6 x params x tokens FLOPs)")
	fs.Float64Var(&s.mfu, "mfu", 0.4, "fraction of the GPU's BF16 peak that forward and backward reach, for -steptime")
	fs.StringVar(&s.chart, "steptime-chart", "", "draw -steptime's phases per d into this .png or .svg file")
}

// check refuses an -mfu that is not a fraction in (0, 1] (NaN, 0 and
// negative values made step times of -9223372036851 ms) and a -tokens
// below 1.
func (s *stepOptions) check() error {
	if !(s.mfu > 0 && s.mfu <= 1) {
		return fmt.Errorf("-mfu=%g: want a fraction of the GPU's peak in (0, 1]", s.mfu)
	}
	if s.tokens < 1 {
		return fmt.Errorf("-tokens=%d: want at least 1 token per GPU and step", s.tokens)
	}
	return nil
}

// runStepPlan prints the step-time plan of o (and draws its chart) and
// returns the exit status.
func runStepPlan(o planOptions, stdout, stderr io.Writer) int {
	err := o.step.check()
	switch {
	case err != nil:
	case o.step.cluster == "calibration":
		err = writeCalibration(stdout)
	default:
		err = writeStepPlan(o, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "distopt plan: %v\n", err)
		return 2
	}
	return 0
}

// stepShape is the step-time model's view of o's model and recipe.
func stepShape(o planOptions) (plan.StepShape, string, error) {
	params, desc := o.modelParams()
	l, err := optimizer.NewLayout(params, 1, o.cfg.Layout)
	if err != nil {
		return plan.StepShape{}, "", err
	}
	return plan.ShapeOf(params, len(l.Buckets), o.cfg.Recipe.Scaling), desc, nil
}

// stepRow is one line of the step-time table.
type stepRow struct {
	label string
	d, g  int
	p     plan.Phases
}

// stepRows predicts every d of o on m: flat sharding, and hierarchical
// sharding in groups of a node (or -group) where d spans several.
func stepRows(o planOptions, m plan.Machine, s plan.StepShape) ([]stepRow, error) {
	g := o.group
	if g == 0 {
		g = m.GPUsPerNode
	}
	var rows []stepRow
	for _, d := range o.ds {
		gs := []int{d}
		if d > g {
			gs = append(gs, g)
		}
		for _, gg := range gs {
			p, err := plan.PredictStep(m, s, d, gg)
			if err != nil {
				return nil, err
			}
			label := "flat"
			if gg < d {
				label = fmt.Sprintf("%d groups x %d", d/gg, gg)
			}
			rows = append(rows, stepRow{label: label, d: d, g: gg, p: p})
		}
	}
	return rows, nil
}

// msf formats a duration in milliseconds.
func msf(d time.Duration) string { return strconv.FormatFloat(d.Seconds()*1e3, 'f', 2, 64) }

// writeStepPlan prints the predicted phases, communication, and step time
// without and with overlap for every d of o.
func writeStepPlan(o planOptions, w io.Writer) error {
	m, err := plan.LookupCluster(o.step.cluster)
	if err != nil {
		return err
	}
	s, desc, err := stepShape(o)
	if err != nil {
		return err
	}
	rows, err := stepRows(o, m, s)
	if err != nil {
		return err
	}
	compute := m.ComputeTime(s.Params, o.step.tokens, o.step.mfu)
	fmt.Fprintf(w, "model:   %s\n         %d parameters, %d buckets, %v\n", desc, s.Params, s.Buckets, o.cfg.Recipe)
	fmt.Fprintf(w, "cluster: %s (NVLink %.0f GB/s, network %.0f GB/s per GPU)\n", m.Name, m.Intra.BusBW/1e9, m.Inter.BusBW/1e9)
	fmt.Fprintf(w, "compute: %s ms per step (6 x params x %d tokens per GPU at %.0f%% of %.0f TFLOP/s)\n\n", msf(compute), o.step.tokens, 100*o.step.mfu, m.PeakFLOPs/1e12)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "d\tsharding\treduce-scatter\tnorm\tupdate\tamax\tcast\tall-gather\tcomm\tstep, no overlap\tstep, overlap\texposed\t")
	for _, r := range rows {
		p := r.p
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.d, r.label,
			msf(p.ReduceScatter), msf(p.Norm), msf(p.Update), msf(p.AmaxReduce), msf(p.Cast), msf(p.AllGather),
			msf(p.Comm()), msf(compute+p.Total()), msf(compute+p.Exposed(compute)), msf(p.Exposed(compute)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\ntimes in ms; phases as examples/multigpu measures them (each waited for); overlap: the reduce-scatter")
	fmt.Fprintln(w, "behind the backward pass (2/3 of compute), the all-gather behind the forward (1/3). Calibration: -steptime calibration.")
	if o.step.chart == "" {
		return nil
	}
	if err := stepChart(rows, desc, m, o.step.chart); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s\n", o.step.chart)
	return nil
}

// stepChart draws the phases of every row as stacked bars.
func stepChart(rows []stepRow, desc string, m plan.Machine, path string) error {
	c := barplot.Chart{Title: "Predicted optimizer step by phase: " + m.Name, Subtitle: desc, Unit: "ms per step",
		Series: []string{"reduce-scatter", "norm", "update", "amax", "cast", "all-gather"},
		Format: func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }}
	for _, r := range rows {
		p := r.p
		var vs []float64
		for _, t := range []time.Duration{p.ReduceScatter, p.Norm, p.Update, p.AmaxReduce, p.Cast, p.AllGather} {
			vs = append(vs, t.Seconds()*1e3)
		}
		c.Bars = append(c.Bars, barplot.Bar{Label: fmt.Sprintf("d=%d %s", r.d, r.label), Values: vs})
	}
	return c.Save(path)
}

// writeCalibration prints the model against every measurement of the two-GPU
// host, and its predictions for the sockets regime.
func writeCalibration(w io.Writer) error {
	s := plan.ShapeOf(plan.GPT13B.Params(), 22, 0)
	s.CastBytes = 5 // current scaling, as measured
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "regime\td\tphase\tpredicted ms\tmeasured ms\terror\tconstants fitted to it\tsource")
	for _, m := range plan.Measurements {
		p, err := plan.PredictStep(plan.Regime(m.Regime), s, m.D, m.D)
		if err != nil {
			return err
		}
		got, err := p.Phase(m.Phase)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.3f\t%+.1f%%\t%v\t%s\n", m.Regime.Name, m.D, m.Phase, msf(got), m.Time.Seconds()*1e3,
			100*(got.Seconds()/m.Time.Seconds()-1), m.Fitted, m.Source)
	}
	p, err := plan.PredictStep(plan.Regime(plan.Sockets), s, 2, 2)
	if err != nil {
		return err
	}
	for _, ph := range []struct {
		name string
		t    time.Duration
	}{{"reduce_scatter", p.ReduceScatter}, {"all_gather", p.AllGather}} {
		fmt.Fprintf(tw, "%s\t2\t%s\t%s\tnot measured\t\t\tscripts/gpu/twonode.sh (REGIMES=1)\n", plan.Sockets.Name, ph.name, msf(ph.t))
	}
	return tw.Flush()
}
