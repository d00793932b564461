package main

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/plan"
	"github.com/distopt/distopt/plan/barplot"
)

// zero1 is the PyTorch ZeRO-1 baseline of scripts/bench/torch_zero1.py:
// BF16 weights and gradients on every rank, the FP32 master and moments
// and an FP32 copy of the gradient shard sharded (zero1PerParam).
var zero1 = plan.Baseline{Name: "PyTorch ZeRO-1 BF16 (torch_zero1.py)", Weights: 2, Grads: 2, Sharded: 16}

// planBars returns memory_plan.png's bars in GiB per rank for params on d
// ranks: the configurations of plan.Baselines other than distopt's and
// zero1 from their formulas, and distopt with FP32 and with BF16 moments
// from optimizer.PredictMemory (scales apart; padding is inside the
// buffers). Each bar has four values: weights, gradients, master +
// moments (and any other optimizer state), scales.
func planBars(params []optimizer.Param, d int, cfg optimizer.Config) ([]barplot.Bar, error) {
	f := float64(plan.NumParams(params)) / (1 << 30)
	var bars []barplot.Bar
	for _, c := range append(slices.Clone(plan.Baselines), zero1) {
		if c.Distopt {
			continue
		}
		bars = append(bars, barplot.Bar{Label: c.Name, Values: []float64{c.Weights * f, c.Grads * f, (c.State + c.Sharded/float64(d)) * f, 0}})
	}
	for _, m := range []struct {
		name string
		dt   buffer.DType
	}{{"distopt FP8, FP32 moments", buffer.Float32}, {"distopt FP8, BF16 moments", buffer.BFloat16}} {
		c := cfg
		c.FirstMomentType, c.SecondMomentType = optimizer.MomentOf(m.dt), optimizer.MomentOf(m.dt)
		r, err := optimizer.PredictMemory(params, d, c)
		if err != nil {
			return nil, err
		}
		b := func(names ...string) float64 {
			var t int64
			for _, name := range names {
				t += r.Get(name)
			}
			return gib(t)
		}
		bars = append(bars, barplot.Bar{Label: m.name, Values: []float64{
			b(optimizer.BufFP8Params, optimizer.BufHPParams),
			b(optimizer.BufGrads),
			b(optimizer.BufMaster, optimizer.BufMomentM, optimizer.BufMomentV),
			b(optimizer.BufScales, optimizer.BufBlockScales),
		}})
	}
	return bars, nil
}

// writeCharts writes the PNGs of the run into o.out and returns their paths.
func writeCharts(o options, s *summary) ([]string, error) {
	var files []string
	save := func(name string, c *barplot.Chart) error {
		path := filepath.Join(o.out, name)
		files = append(files, path)
		return c.Save(path)
	}
	desc := fmt.Sprintf("GPT-like, %d layers, hidden %d, %.2fB parameters", o.gpt.Layers, o.gpt.Hidden, float64(s.Params)/1e9)
	bars, err := planBars(o.gpt.Params(), s.World, o.config())
	if err != nil {
		return nil, err
	}
	if err := save("memory_plan.png", &barplot.Chart{
		Title:    fmt.Sprintf("Predicted memory per rank, d = %d", s.World),
		Subtitle: desc + "; bytes per parameter from each configuration's formula, distopt from PredictMemory",
		Unit:     "GiB per rank",
		Series:   []string{"weights", "gradients", "master + moments", "scales"},
		Bars:     bars,
		Format:   func(v float64) string { return fmt.Sprintf("%.2f", v) },
	}); err != nil {
		return nil, err
	}
	if s.Overlap != nil {
		err := save("step_phases.png", &barplot.Chart{
			Title: fmt.Sprintf("Training iteration, d = %d: compute, the optimizer's own work, exposed communication", s.World),
			Subtitle: desc + fmt.Sprintf("; FP8 GEMMs of every linear layer, %d tokens x %d micro-batches per step; medians of the slowest rank",
				s.Overlap.Tokens, s.Overlap.Micro),
			Unit:   "ms",
			Series: overlapSeries,
			Bars:   overlapBars(s.World, s.Overlap),
			Format: func(v float64) string { return fmt.Sprintf("%.1f ms", v) },
		})
		return files, err
	}
	phaseBars := []barplot.Bar{{Label: fmt.Sprintf("distopt, FP8 all-gather (step %.1f ms)", s.PlainMs), Values: s.PhaseMs}}
	if bl := s.Baseline; bl != nil && bl.World == s.World {
		phaseBars = append(phaseBars, barplot.Bar{Label: fmt.Sprintf("PyTorch ZeRO-1, BF16 all-gather (step %.1f ms)", bl.PlainStepMs), Values: baselinePhases(bl)})
	}
	if err := save("step_phases.png", &barplot.Chart{
		Title:    fmt.Sprintf("Step time by phase, d = %d", s.World),
		Subtitle: desc + "; medians of the slowest rank, each phase waited for",
		Unit:     "ms",
		Series:   phaseNames,
		Bars:     phaseBars,
		Format:   func(v float64) string { return fmt.Sprintf("%.2f ms", v) },
	}); err != nil {
		return nil, err
	}
	var mem []barplot.Bar
	for _, r := range s.Ranks {
		if m := r.Memory; m != nil {
			mem = append(mem, barplot.Bar{Label: fmt.Sprintf("distopt rank %d", r.Rank),
				Values: []float64{gib(r.Predicted), gib(max(0, m.Peak-m.Context-m.NCCL-r.Predicted)), gib(m.Context), gib(m.NCCL)}})
		}
	}
	if bl := s.Baseline; bl != nil && bl.World == s.World {
		for _, r := range bl.Ranks {
			mem = append(mem, barplot.Bar{Label: fmt.Sprintf("PyTorch rank %d", r.Rank),
				Values: []float64{gib(r.MaxAllocated), gib(max(0, r.NVMLPeak-r.NVMLContext-r.NVMLNCCL-r.MaxAllocated)), gib(r.NVMLContext), gib(r.NVMLNCCL)}})
		}
	}
	if len(mem) > 0 {
		if err := save("memory_measured.png", &barplot.Chart{
			Title:    fmt.Sprintf("GPU memory per rank measured by NVML, d = %d", s.World),
			Subtitle: desc + "; buffers: distopt's prediction, PyTorch's max allocated",
			Unit:     "GiB",
			Series:   []string{"buffers", "other (driver rounding, caches)", "CUDA context", "NCCL"},
			Bars:     mem,
			Format:   func(v float64) string { return fmt.Sprintf("%.2f", v) },
		}); err != nil {
			return nil, err
		}
	}
	return files, nil
}
