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
