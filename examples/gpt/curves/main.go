// Command curves compares the loss curves of examples/gpt runs with the
// PyTorch reference's (scripts/gpt/torch_gpt.py), by issue 16's criteria,
// and draws them:
//
//	curves -ref torch.json -steps 2000 -warmup 100 -png curves.png current.json delayed.json tile.json
//
// (-diff-png FILE also draws each run's relative difference from the
// reference at every evaluation, with the criteria's bands)
// prints a table (final validation loss of each run, its relative
// difference from the reference's, the worst difference after warm-up)
// and exits 1 unless every run is within -final (1%) of the reference at
// the last evaluation and within -every (2%) at every evaluation after
// -warmup steps. Files ending in .log are read as progress logs (the
// printed 4-decimal losses), files ending in .csv as interop/gomlx's
// example's curves (-out), others as JSON curves (package
// examples/gpt/curve).
//
//	curves -seeds -ref torch1.json,torch2.json,torch3.json -steps 2000 -warmup 100 tile1.json,tile2.json,tile3.json ...
//
// is the gate over seeds: the reference and each configuration trained
// with several seeds (batch orders), one comma-separated list per
// configuration, the k-th run of each list trained with the k-th
// reference's seed. The criteria apply to the mean over the seeds of each
// run's signed difference from its own seed's reference, which keeps a
// configuration's effect and shrinks the trajectories' spread that a
// single run's difference mixes in. It prints each seed's final
// difference, their mean and standard deviation, and the references' own
// spread; -diff-png draws the means.
//
//	curves -resume full.json stopped.json resumed.json
//
// checks that a run stopped and resumed gives the uninterrupted run's
// losses bit for bit (JSON curves only).
//
//	curves -speed [-json speed.json -commit C -machine M] distopt_small.json torch_small_flash.json,torch_small_cudnn.json ...
//
// prints the tokens/s, MFU and peak memory of runs in pairs (a run, then
// its reference) and their ratios; a reference given as a comma-separated
// list is the fastest of them (PyTorch with each attention backend).
// -json also writes the table as JSON (curve.SpeedReport), with the date,
// -commit and -machine.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/distopt/distopt/examples/gpt/curve"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("curves", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ref := fs.String("ref", "", "the reference's curve (JSON or .log); with -seeds a comma-separated list, one per seed")
	seeds := fs.Bool("seeds", false, "the gate over seeds: -ref and each run are comma-separated lists, one curve per seed in the same order; the criteria apply to the mean difference over the seeds")
	resume := fs.Bool("resume", false, "check that the runs after the first (stopped, then resumed) give the first's losses bit for bit")
	speed := fs.Bool("speed", false, "print the speed and memory of runs in pairs (a run, then its reference, or comma-separated references of which the fastest is taken) and their ratios")
	var rep speedOut
	fs.StringVar(&rep.json, "json", "", "with -speed: also write the table as JSON into this file")
	fs.StringVar(&rep.report.Commit, "commit", "", "with -json: the commit measured")
	fs.StringVar(&rep.report.Machine, "machine", "", "with -json: the machine measured on")
	var c curve.Criteria
	fs.Float64Var(&c.Final, "final", 0.01, "largest relative difference of the last validation loss")
	fs.Float64Var(&c.Every, "every", 0.02, "largest relative difference of every validation loss after -warmup")
	fs.IntVar(&c.Warmup, "warmup", 0, "steps of warm-up: evaluations up to this step are not compared")
	fs.IntVar(&c.Steps, "steps", 0, "step of the last evaluation every run must reach (0: the reference's last)")
	png := fs.String("png", "", "draw the curves (reference first) into this image")
	diffPNG := fs.String("diff-png", "", "draw each run's validation loss relative to the reference's, with the criteria's bands, into this image")
	title := fs.String("title", "validation loss", "title of the image")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	switch {
	case *resume:
		err = checkResume(fs.Args(), stdout)
	case *speed:
		err = writeSpeed(fs.Args(), rep, stdout)
	case *ref == "" || fs.NArg() == 0:
		err = errors.New("want -ref FILE and at least one run's curve, or -resume FULL PART...")
	case *seeds:
		err = compareSeeds(*ref, fs.Args(), c, images{*png, *diffPNG, *title}, stdout)
	default:
		err = compare(*ref, fs.Args(), c, images{*png, *diffPNG, *title}, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "curves:", err)
		return 1
	}
	return 0
}

// load reads a JSON curve, a progress log when the name ends in .log, or
// interop/gomlx's example's CSV when it ends in .csv.
func load(path string) (curve.Curve, error) {
	parse := curve.ParseLog
	switch {
	case strings.HasSuffix(path, ".csv"):
		parse = curve.ParseCSV
	case !strings.HasSuffix(path, ".log"):
		return curve.Read(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return curve.Curve{}, err
	}
	defer f.Close()
	base := path[strings.LastIndex(path, "/")+1:]
	return parse(f, strings.TrimSuffix(base, base[strings.LastIndex(base, "."):]))
}

// images are compare's optional pictures: the curves, and the runs'
// differences from the reference.
type images struct{ curves, diff, title string }

func compare(refPath string, paths []string, c curve.Criteria, img images, out io.Writer) error {
	ref, err := load(refPath)
	if err != nil {
		return err
	}
	runs := make([]curve.Curve, len(paths))
	for i, p := range paths {
		if runs[i], err = load(p); err != nil {
			return err
		}
	}
	if img.curves != "" {
		if err := curve.Plot(img.curves, img.title, append([]curve.Curve{ref}, runs...)); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", img.curves)
	}
	if img.diff != "" {
		if err := curve.PlotDiff(img.diff, img.title, ref, runs, c); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", img.diff)
	}
	rows := curve.Check(ref, runs, c)
	if err := curve.WriteTable(out, ref.Name, rows); err != nil {
		return err
	}
	if failed := misses(rows, func(r curve.Row) bool { return r.OK }); failed > 0 {
		return fmt.Errorf("%d of %d runs miss the criteria (final within %.2f%%, every evaluation after step %d within %.2f%%)",
			failed, len(rows), 100*c.Final, c.Warmup, 100*c.Every)
	}
	fmt.Fprintf(out, "all %d runs within %.2f%% of %s at the end and %.2f%% at every evaluation after step %d\n",
		len(rows), 100*c.Final, ref.Name, 100*c.Every, c.Warmup)
	return nil
}

// compareSeeds is the gate over seeds: refList and each of lists are
// comma-separated curves, one per seed in the same order.
func compareSeeds(refList string, lists []string, c curve.Criteria, img images, out io.Writer) error {
	if img.curves != "" {
		return errors.New("-png draws single runs; with -seeds use -diff-png (the mean differences), or draw each seed's runs without -seeds")
	}
	refs, err := loadList(refList)
	if err != nil {
		return err
	}
	runs := make([][]curve.Curve, len(lists))
	for i, l := range lists {
		if runs[i], err = loadList(l); err != nil {
			return err
		}
	}
	rows, err := curve.CheckSeeds(refs, runs, c)
	if err != nil {
		return err
	}
	if img.diff != "" {
		if err := curve.PlotSeedsDiff(img.diff, img.title, refs, runs, c); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", img.diff)
	}
	if err := curve.WriteSeedTable(out, refs[0].Name, rows); err != nil {
		return err
	}
	step := rows[0].FinalStep
	if mean, sd, err := curve.SeedSpread(refs, step); err == nil {
		fmt.Fprintf(out, "%s itself over the %d seeds at step %d: validation loss %.4f, sd %.4f (%.2f%%)\n", refs[0].Name, len(refs), step, mean, sd, 100*sd/mean)
	} else {
		fmt.Fprintf(out, "%s's spread over the seeds: %v\n", refs[0].Name, err)
	}
	if failed := misses(rows, func(r curve.SeedRow) bool { return r.OK }); failed > 0 {
		return fmt.Errorf("%d of %d configurations miss the criteria over %d seeds (mean final difference within %.2f%%, every mean after step %d within %.2f%%)",
			failed, len(rows), len(refs), 100*c.Final, c.Warmup, 100*c.Every)
	}
	fmt.Fprintf(out, "all %d configurations within %.2f%% of %s at the end and %.2f%% at every evaluation after step %d, in the mean over %d seeds\n",
		len(rows), 100*c.Final, refs[0].Name, 100*c.Every, c.Warmup, len(refs))
	return nil
}

// misses counts the rows that are not ok.
func misses[R any](rows []R, ok func(R) bool) int {
	n := 0
	for _, r := range rows {
		if !ok(r) {
			n++
		}
	}
	return n
}

// loadList loads the comma-separated curves of list.
func loadList(list string) ([]curve.Curve, error) {
	var cs []curve.Curve
	for _, p := range strings.Split(list, ",") {
		c, err := load(p)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func checkResume(paths []string, out io.Writer) error {
	if len(paths) < 2 {
		return errors.New("-resume wants the uninterrupted run's curve and the curves of the stopped and resumed runs")
	}
	cs := make([]curve.Curve, len(paths))
	for i, p := range paths {
		if strings.HasSuffix(p, ".log") {
			return fmt.Errorf("%s: the resume check reads JSON curves (a log's losses are rounded)", p)
		}
		var err error
		if cs[i], err = curve.Read(p); err != nil {
			return err
		}
	}
	n, err := curve.Resume(cs[0], cs[1:]...)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "resume: %d training losses and %d validation losses of %s equal bit for bit\n", n, len(cs[0].Valid), cs[0].Name)
	return nil
}

// speedOut is where -speed writes its JSON report, and what it records
// beside the rows.
type speedOut struct {
	json   string
	report curve.SpeedReport
}

// writeSpeed prints (and with out.json writes) the comparison of runs
// given in pairs: a run's curve, then its reference's or several
// comma-separated references'.
func writeSpeed(args []string, out speedOut, stdout io.Writer) error {
	if len(args) == 0 || len(args)%2 != 0 {
		return fmt.Errorf("-speed wants runs in pairs (a run, then its references), got %d files", len(args))
	}
	var rows []curve.SpeedRow
	for i := 0; i < len(args); i += 2 {
		run, err := curve.Read(args[i])
		if err != nil {
			return err
		}
		var refs []curve.Curve
		for _, p := range strings.Split(args[i+1], ",") {
			c, err := curve.Read(p)
			if err != nil {
				return err
			}
			refs = append(refs, c)
		}
		row, err := curve.NewSpeedRow(run, refs)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if err := curve.WriteSpeed(stdout, rows); err != nil {
		return err
	}
	if out.json == "" {
		return nil
	}
	out.report.Rows = rows
	if err := out.report.Write(out.json); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", out.json)
	return nil
}
