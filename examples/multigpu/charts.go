package main

import (
	"fmt"
	"path/filepath"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/chart"
	"github.com/distopt/distopt/optimizer"
)

// planConfig is one bar of memory_plan.png: bytes per parameter per rank
// at d of weights, gradients and optimizer state (master, moments and any
// sharded gradient copy).
type planConfig struct {
	name                    string
	weights, grads, sharded float64 // sharded: bytes per parameter before dividing by d
	unsharded               float64 // optimizer state that is not sharded
}

// planConfigs are the configurations users weigh, split into parts; their
// sums are optimizer.Baselines' formulas (and zero1PerParam).
var planConfigs = []planConfig{
	{name: "FP32 Adam, unsharded", weights: 4, grads: 4, unsharded: 8},
	{name: "BF16 + FP32 master clone", weights: 2, grads: 2, unsharded: 12},
	{name: "Megatron BF16 distributed optimizer", weights: 2, grads: 4, sharded: 12},
	{name: "PyTorch ZeRO-1 BF16 (torch_zero1.py)", weights: 2, grads: 2, sharded: 16},
}

// planBars returns memory_plan.png's bars in GiB per rank for params on d
// ranks: the configurations of planConfigs from their formulas, and
// distopt with FP32 and with BF16 moments from optimizer.PredictMemory
// (scales apart; padding is inside the buffers).
func planBars(params []optimizer.Param, d int, cfg optimizer.Config) ([]chart.Bar, error) {
	var n int64
	for _, p := range params {
		n += int64(numElements(p.Shape))
	}
	var bars []chart.Bar
	for _, c := range planConfigs {
		f := float64(n) / (1 << 30)
		bars = append(bars, chart.Bar{Label: c.name, Values: []float64{c.weights * f, c.grads * f, (c.unsharded + c.sharded/float64(d)) * f, 0}})
	}
	for _, m := range []struct {
		name string
		dt   collective.DType
	}{{"distopt FP8, FP32 moments", collective.Float32}, {"distopt FP8, BF16 moments", collective.BFloat16}} {
		c := cfg
		c.MomentType = m.dt
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
		bars = append(bars, chart.Bar{Label: m.name, Values: []float64{
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
	save := func(name string, c *chart.Bars) error {
		path := filepath.Join(o.out, name)
		files = append(files, path)
		return c.SavePNG(path)
	}
	desc := fmt.Sprintf("GPT-like, %d layers, hidden %d, %.2fB parameters", o.gpt.Layers, o.gpt.Hidden, float64(s.Params)/1e9)
	bars, err := planBars(o.gpt.Params(), s.World, o.config())
	if err != nil {
		return nil, err
	}
	if err := save("memory_plan.png", &chart.Bars{
		Title:    fmt.Sprintf("Predicted memory per rank, d = %d", s.World),
		Subtitle: desc + "; bytes per parameter from each configuration's formula, distopt from PredictMemory",
		Unit:     "GiB per rank",
		Series:   []string{"weights", "gradients", "master + moments", "scales"},
		Bars:     bars,
		Format:   func(v float64) string { return fmt.Sprintf("%.2f", v) },
	}); err != nil {
		return nil, err
	}
	phaseBars := []chart.Bar{{Label: fmt.Sprintf("distopt, FP8 all-gather (step %.1f ms)", s.PlainMs), Values: s.PhaseMs}}
	if bl := s.Baseline; bl != nil && bl.World == s.World {
		phaseBars = append(phaseBars, chart.Bar{Label: fmt.Sprintf("PyTorch ZeRO-1, BF16 all-gather (step %.1f ms)", bl.PlainStepMs), Values: baselinePhases(bl)})
	}
	if err := save("step_phases.png", &chart.Bars{
		Title:    fmt.Sprintf("Step time by phase, d = %d", s.World),
		Subtitle: desc + "; medians of the slowest rank, each phase waited for",
		Unit:     "ms",
		Series:   phaseNames,
		Bars:     phaseBars,
		Width:    900,
		Format:   func(v float64) string { return fmt.Sprintf("%.2f ms", v) },
	}); err != nil {
		return nil, err
	}
	var mem []chart.Bar
	for _, r := range s.Ranks {
		if m := r.Memory; m != nil {
			mem = append(mem, chart.Bar{Label: fmt.Sprintf("distopt rank %d", r.Rank),
				Values: []float64{gib(r.Predicted), gib(max(0, m.Peak-m.Context-m.NCCL-r.Predicted)), gib(m.Context), gib(m.NCCL)}})
		}
	}
	if bl := s.Baseline; bl != nil && bl.World == s.World {
		for _, r := range bl.Ranks {
			mem = append(mem, chart.Bar{Label: fmt.Sprintf("PyTorch rank %d", r.Rank),
				Values: []float64{gib(r.MaxAllocated), gib(max(0, r.NVMLPeak-r.NVMLContext-r.NVMLNCCL-r.MaxAllocated)), gib(r.NVMLContext), gib(r.NVMLNCCL)}})
		}
	}
	if len(mem) > 0 {
		if err := save("memory_measured.png", &chart.Bars{
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
