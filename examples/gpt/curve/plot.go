package curve

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// smoothing is the window of the moving average drawn of the training
// losses.
const smoothing = 25

// Plot draws the curves into a PNG (or SVG, PDF: by path's extension) at
// path: each run's validation losses as a line with points, and its
// training losses as a thin line (a moving average over smoothing steps),
// in the same colour.
func Plot(path, title string, curves []Curve) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = fmt.Sprintf("step (dashed: training loss, mean of %d steps)", smoothing)
	p.Y.Label.Text = "loss (nats per byte)"
	p.Add(plotter.NewGrid())
	for i, c := range curves {
		col := plotutil.Color(i)
		if len(c.Train) > 0 {
			l, err := plotter.NewLine(movingAverage(c.Train, smoothing))
			if err != nil {
				return fmt.Errorf("curve: %s: %w", c.Name, err)
			}
			l.Color, l.Width, l.Dashes = col, vg.Points(0.5), plotutil.Dashes(1)
			p.Add(l)
		}
		if len(c.Valid) > 0 {
			l, s, err := plotter.NewLinePoints(points(c.Valid))
			if err != nil {
				return fmt.Errorf("curve: %s: %w", c.Name, err)
			}
			l.Color, s.Color, l.Width = col, col, vg.Points(1.5)
			p.Add(l, s)
			p.Legend.Add(c.Name+" (validation)", l, s)
		}
	}
	p.Legend.Top = true
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("curve: %w", err)
	}
	return nil
}

func points(ps []Point) plotter.XYs {
	xy := make(plotter.XYs, len(ps))
	for i, p := range ps {
		xy[i] = plotter.XY{X: float64(p.Step), Y: p.Loss}
	}
	return xy
}

// movingAverage is the mean of the last (up to) w losses at each step.
func movingAverage(ps []Point, w int) plotter.XYs {
	xy := make(plotter.XYs, len(ps))
	sum := 0.0
	for i, p := range ps {
		sum += p.Loss
		if i >= w {
			sum -= ps[i-w].Loss
		}
		xy[i] = plotter.XY{X: float64(p.Step), Y: sum / float64(min(i+1, w))}
	}
	return xy
}

// Differences is run's validation loss relative to ref's at every step both
// evaluated, (run - ref) / ref, in the order of ref's evaluations: negative
// where the run's loss is lower.
func Differences(ref, run Curve) []Point {
	got := map[int]float64{}
	for _, p := range run.Valid {
		got[p.Step] = p.Loss
	}
	var d []Point
	for _, p := range ref.Valid {
		if v, ok := got[p.Step]; ok {
			d = append(d, Point{Step: p.Step, Loss: (v - p.Loss) / p.Loss})
		}
	}
	return d
}

// PlotDiff draws each run's Differences from ref, in percent, after warmup
// steps, with the criteria's bands (c.Final and c.Every either side of
// zero) as thin grey lines: how far each run's curve is from the
// reference's, and whether that is more than what other runs (for example
// the reference trained at another precision) show.
func PlotDiff(path, title string, ref Curve, runs []Curve, c Criteria) error {
	series := make([]diffSeries, len(runs))
	for i, r := range runs {
		series[i] = diffSeries{r.Name, Differences(ref, r)}
	}
	return plotDiffs(path, title, ref.Name, fmt.Sprintf("validation loss relative to %s (%%)", ref.Name), lastStep(ref), series, c)
}

// PlotSeedsDiff draws each configuration's mean difference over the seeds
// (as CheckSeeds takes it: runs[i][k] against refs[k]), in percent, after
// warmup steps, with the criteria's bands.
func PlotSeedsDiff(path, title string, refs []Curve, runs [][]Curve, c Criteria) error {
	if len(refs) == 0 {
		return fmt.Errorf("curve: no reference runs")
	}
	series := make([]diffSeries, len(runs))
	for i, rs := range runs {
		if len(rs) != len(refs) {
			return fmt.Errorf("curve: configuration %d has %d runs for %d seeds", i+1, len(rs), len(refs))
		}
		sum, count := map[int]float64{}, map[int]int{}
		for k, r := range rs {
			for _, d := range Differences(refs[k], r) {
				sum[d.Step] += d.Loss
				count[d.Step]++
			}
		}
		series[i].name = fmt.Sprintf("%s (mean of %d seeds)", rs[0].Name, len(rs))
		for _, q := range refs[0].Valid {
			if count[q.Step] == len(rs) {
				series[i].diffs = append(series[i].diffs, Point{Step: q.Step, Loss: sum[q.Step] / float64(len(rs))})
			}
		}
	}
	ylabel := fmt.Sprintf("validation loss relative to %s, same seed (%%)", refs[0].Name)
	return plotDiffs(path, title, refs[0].Name, ylabel, lastStep(refs[0]), series, c)
}

// diffSeries is one line of a difference plot: relative differences by
// step.
type diffSeries struct {
	name  string
	diffs []Point
}

func lastStep(c Curve) int {
	last := 0
	for _, q := range c.Valid {
		last = max(last, q.Step)
	}
	return last
}

// plotDiffs draws the series in percent after c.Warmup, with the bands
// c.Final and c.Every either side of zero as thin grey lines up to last;
// ref names the reference in errors.
func plotDiffs(path, title, ref, ylabel string, last int, series []diffSeries, c Criteria) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	for _, band := range []float64{c.Final, -c.Final, c.Every, -c.Every} {
		l, err := plotter.NewLine(plotter.XYs{{X: float64(c.Warmup), Y: 100 * band}, {X: float64(last), Y: 100 * band}})
		if err != nil {
			return fmt.Errorf("curve: %w", err)
		}
		l.Color, l.Width, l.Dashes = plotutil.Color(7), vg.Points(0.5), plotutil.Dashes(1)
		p.Add(l)
	}
	for i, s := range series {
		var xy plotter.XYs
		for _, d := range s.diffs {
			if d.Step > c.Warmup {
				xy = append(xy, plotter.XY{X: float64(d.Step), Y: 100 * d.Loss})
			}
		}
		if len(xy) == 0 {
			return fmt.Errorf("curve: %s has no validation loss at the steps %s evaluated after step %d", s.name, ref, c.Warmup)
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("curve: %s: %w", s.name, err)
		}
		col := plotutil.Color(i + 1) // Plot draws the reference in colour 0
		l.Color, pts.Color, l.Width = col, col, vg.Points(1.5)
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
	}
	p.Legend.Top = true
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("curve: %w", err)
	}
	return nil
}
