package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/plan"
)

// rankSummary is one rank's result.
type rankSummary struct {
	Rank             int                     `json:"rank"`
	World            int                     `json:"world"`
	Backend          string                  `json:"backend"`
	Params           int64                   `json:"params"`
	PhaseMs          []float64               `json:"phase_ms"`      // medians over the timed steps, in phaseNames order
	StepMs           float64                 `json:"step_ms"`       // median sum of the phases, timed steps
	PlainStepMs      float64                 `json:"plain_step_ms"` // median wall time of Step without waits
	BarrierMs        float64                 `json:"barrier_ms"`    // median barrier, included once in update and in cast
	GradNorm         float64                 `json:"grad_norm"`     // of the last step
	ExpectedGradNorm float64                 `json:"expected_grad_norm"`
	Predicted        int64                   `json:"predicted_bytes"` // optimizer.PredictMemory's Total
	Buffers          []optimizer.BufferBytes `json:"buffers"`
	Memory           *memSummary             `json:"nvml,omitempty"`
	Overlap          *overlapRank            `json:"overlap,omitempty"` // -compute gemm
}

// gatherSummaries gives every rank all ranks' summaries, in rank order.
func gatherSummaries(ctx context.Context, store *rendezvous.Store, s *rankSummary) ([]*rankSummary, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	vals, err := store.AllGatherValues(ctx, "multigpu/summary", b)
	if err != nil {
		return nil, err
	}
	all := make([]*rankSummary, len(vals))
	for i, v := range vals {
		all[i] = new(rankSummary)
		if err := json.Unmarshal(v, all[i]); err != nil {
			return nil, fmt.Errorf("summary of rank %d: %w", i, err)
		}
	}
	return all, nil
}

// baseline is what scripts/bench/torch_zero1.py writes with --json.
type baseline struct {
	World          int                `json:"world"`
	Params         int64              `json:"params"`
	PaddedParams   int64              `json:"padded_params"`
	PhaseMs        map[string]float64 `json:"phase_ms"` // slowest rank's medians
	StepMs         float64            `json:"step_ms"`
	PlainStepMs    float64            `json:"plain_step_ms"`
	PredictedBytes int64              `json:"predicted_bytes"` // 2 + 2 + 16/d bytes per padded parameter
	BarrierMs      float64            `json:"barrier_ms"`      // median dist.barrier, included once in update and in cast
	Torch          string             `json:"torch"`
	NCCL           string             `json:"nccl"`
	Ranks          []baselineRank     `json:"ranks"`
}

type baselineRank struct {
	Rank         int   `json:"rank"`
	MaxAllocated int64 `json:"max_allocated"`
	MaxReserved  int64 `json:"max_reserved"`
	NVMLContext  int64 `json:"nvml_context"` // after CUDA initialisation
	NVMLNCCL     int64 `json:"nvml_nccl"`    // added by the process group and a warm-up
	NVMLPeak     int64 `json:"nvml_peak"`
}

func readBaseline(path string) (*baseline, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var bl baseline
	if err := json.Unmarshal(b, &bl); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &bl, nil
}

// zero1PerParam is the per-rank bytes per parameter of the PyTorch ZeRO-1
// baseline at d ranks: BF16 parameters and gradients (2 + 2), and sharded
// the FP32 master, both Adam moments and the FP32 copy of the gradient
// shard that fused AdamW needs (16/d).
func zero1PerParam(d int) float64 { return 4 + 16/float64(d) }

// target is one of issue 7's checks.
type target struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	NA     bool   `json:"not_applicable,omitempty"` // the goal's condition does not hold
	Detail string `json:"detail"`
}

// summary is summary.json.
type summary struct {
	Model    plan.GPTConfig `json:"model"`
	Params   int64          `json:"params"`
	World    int            `json:"world"`
	Phases   []string       `json:"phases"`
	PhaseMs  []float64      `json:"phase_ms"` // slowest rank's median of each phase
	StepMs   float64        `json:"step_ms"`
	PlainMs  float64        `json:"plain_step_ms"`
	Ranks    []*rankSummary `json:"ranks"`
	Baseline *baseline      `json:"baseline,omitempty"`
	Targets  []target       `json:"targets,omitempty"`
	Overlap  *overlapResult `json:"overlap,omitempty"` // -compute gemm
}

// report prints the run's summary and writes the files of -out.
func report(o options, ranks []*rankSummary, w io.Writer) error {
	s := summary{Model: o.gpt, Params: ranks[0].Params, World: len(ranks), Phases: phaseNames, Ranks: ranks}
	s.PhaseMs = make([]float64, len(phaseNames))
	for _, r := range ranks {
		for i, v := range r.PhaseMs {
			s.PhaseMs[i] = max(s.PhaseMs[i], v)
		}
		s.StepMs, s.PlainMs = max(s.StepMs, r.StepMs), max(s.PlainMs, r.PlainStepMs)
	}
	if ranks[0].Overlap != nil {
		return reportOverlap(o, &s, w)
	}
	if o.baseline != "" {
		bl, err := readBaseline(o.baseline)
		if err != nil {
			return err
		}
		s.Baseline = bl
	}
	fmt.Fprintf(w, "\n== summary: %d parameters on %d ranks (%s)\n", s.Params, s.World, ranks[0].Backend)
	fmt.Fprintf(w, "gradient norm of the last step %.4g (the model expects %.4g)\n", ranks[0].GradNorm, ranks[0].ExpectedGradNorm)
	writePhases(w, o, &s)
	writeMemory(w, &s)
	s.Targets = targets(&s)
	for _, t := range s.Targets {
		mark := "ok  "
		if !t.OK {
			mark = "MISS"
		}
		fmt.Fprintf(w, "[%s] %s: %s\n", mark, t.Name, t.Detail)
	}
	return writeOut(o, &s, w)
}

// writeOut writes summary.json and the charts into -out, if set.
func writeOut(o options, s *summary, w io.Writer) error {
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	files, err := writeCharts(o, s)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s\n", strings.Join(append([]string{filepath.Join(o.out, "summary.json")}, files...), ", "))
	return nil
}

// writePhases prints the phase table, with the baseline's when there is one.
func writePhases(w io.Writer, o options, s *summary) {
	fmt.Fprintf(w, "\nmedian time of each phase over %d timed steps, slowest rank (ms); step = without waits between phases, median of %d\n", o.steps, o.plainSteps)
	fmt.Fprintf(w, "%-22s", "")
	for _, n := range phaseNames {
		fmt.Fprintf(w, " %14s", n)
	}
	fmt.Fprintf(w, " %10s %10s\n", "sum", "step")
	row := func(name string, ph []float64, step float64) {
		fmt.Fprintf(w, "%-22s", name)
		for _, v := range ph {
			fmt.Fprintf(w, " %14.3f", v)
		}
		fmt.Fprintf(w, " %10.3f %10.3f\n", sum(ph), step)
	}
	row("distopt (FP8 gather)", s.PhaseMs, s.PlainMs)
	barrier := 0.0
	for _, r := range s.Ranks {
		barrier = max(barrier, r.BarrierMs)
	}
	if bl := s.Baseline; bl != nil {
		bp := baselinePhases(bl)
		row("PyTorch ZeRO-1 (BF16)", bp, bl.PlainStepMs)
		fmt.Fprintf(w, "%-22s", "distopt / PyTorch")
		for i := range phaseNames {
			fmt.Fprintf(w, " %14s", ratio(s.PhaseMs[i], bp[i]))
		}
		fmt.Fprintf(w, " %10s %10s\n", ratio(sum(s.PhaseMs), sum(bp)), ratio(s.PlainMs, bl.PlainStepMs))
		fmt.Fprintf(w, "distopt's update includes one barrier (%.3f ms, median; PyTorch's update and cast one each, %.3f ms); its cast phase holds the all-gathers of all buckets but the last (each starts as its bucket is cast): compare cast + all_gather\n", barrier, bl.BarrierMs)
	} else {
		fmt.Fprintf(w, "update includes one barrier: %.3f ms (median); the cast phase holds the all-gathers of all buckets but the last (each starts as its bucket is cast)\n", barrier)
	}
}

// baselinePhases orders the baseline's phases as phaseNames (0 for a
// phase it does not have: the amax reduction).
func baselinePhases(bl *baseline) []float64 {
	ph := make([]float64, len(phaseNames))
	for i, n := range phaseNames {
		ph[i] = bl.PhaseMs[n]
	}
	return ph
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fx", a/b)
}

// writeMemory prints each rank's memory: the prediction, what the library
// allocated, and NVML's measurements.
func writeMemory(w io.Writer, s *summary) {
	fmt.Fprintf(w, "\nmemory per rank (GiB = 2^30 bytes)\n")
	fmt.Fprintf(w, "%-16s %10s %10s %10s %10s %10s %10s %10s %8s\n", "", "predicted", "allocated", "nvml peak", "context", "nccl", "optimizer", "in steps", "measure")
	for _, r := range s.Ranks {
		m := r.Memory
		if m == nil {
			fmt.Fprintf(w, "distopt rank %-3d %10.3f (no GPU memory measured)\n", r.Rank, gib(r.Predicted))
			continue
		}
		fmt.Fprintf(w, "distopt rank %-3d %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %8s\n", r.Rank, gib(r.Predicted), gib(m.Allocated),
			gib(m.Peak), gib(m.Context), gib(m.NCCL), gib(m.Optimizer), gib(m.Steps), m.Measure)
	}
	if bl := s.Baseline; bl != nil {
		for _, r := range bl.Ranks {
			fmt.Fprintf(w, "PyTorch rank %-3d %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10s %8s\n", r.Rank, gib(bl.PredictedBytes), gib(r.MaxAllocated),
				gib(r.NVMLPeak), gib(r.NVMLContext), gib(r.NVMLNCCL), gib(r.NVMLPeak-r.NVMLContext-r.NVMLNCCL), "", "process")
		}
		fmt.Fprintln(w, "(PyTorch: allocated = torch.cuda.max_memory_allocated; optimizer = peak - context - nccl)")
	}
}

// targets evaluates issue 7's checks on what was measured.
func targets(s *summary) []target {
	var ts []target
	worst := 0.0
	var detail []string
	measured := true
	for _, r := range s.Ranks {
		m := r.Memory
		if m == nil {
			measured = false
			break
		}
		explained := r.Predicted + m.Context + m.NCCL
		dev := float64(m.Peak-explained) / float64(explained)
		if math.Abs(dev) > math.Abs(worst) {
			worst = dev
		}
		detail = append(detail, fmt.Sprintf("rank %d: peak %.3f GiB = predicted %.3f x %.3f; predicted + context %.3f + NCCL %.3f = %.3f GiB (%+.2f%%); optimizer.New added %.3f GiB = %.4f x predicted",
			r.Rank, gib(m.Peak), gib(r.Predicted), float64(m.Peak)/float64(r.Predicted), gib(m.Context), gib(m.NCCL), gib(explained), 100*dev,
			gib(m.Optimizer), float64(m.Optimizer)/float64(r.Predicted)))
	}
	if !measured {
		return nil
	}
	ts = append(ts, target{Name: "NVML memory within 5% of the prediction plus the measured context and NCCL", OK: math.Abs(worst) <= 0.05, Detail: strings.Join(detail, "; ")})
	bl := s.Baseline
	if bl == nil {
		return ts
	}
	if bl.World != s.World || bl.Params != s.Params {
		return append(ts, target{Name: "baseline", Detail: fmt.Sprintf("the baseline ran %d parameters on %d ranks, distopt %d on %d: not compared", bl.Params, bl.World, s.Params, s.World)})
	}
	var ours, theirs int64
	for _, r := range s.Ranks {
		ours = max(ours, r.Memory.Peak)
	}
	for _, r := range bl.Ranks {
		theirs = max(theirs, r.NVMLPeak)
	}
	predicted := bl.PredictedBytes - s.Ranks[0].Predicted
	got := theirs - ours
	ts = append(ts, target{Name: "memory below the baseline's by the predicted margin", OK: float64(got) >= 0.95*float64(predicted),
		Detail: fmt.Sprintf("largest NVML peak %.3f GiB vs PyTorch %.3f GiB: %.3f GiB less (%.1f%%); predicted %.3f GiB less (PyTorch 2 + 2 + 16/d = %.3f bytes/param, distopt %.3f)",
			gib(ours), gib(theirs), gib(got), 100*float64(got)/float64(theirs), gib(predicted), zero1PerParam(s.World), float64(s.Ranks[0].Predicted)/float64(s.Params))})
	ts = append(ts, target{Name: "step time no worse than the baseline", OK: s.PlainMs <= bl.PlainStepMs,
		Detail: fmt.Sprintf("%.3f ms vs %.3f ms (%s)", s.PlainMs, bl.PlainStepMs, ratio(s.PlainMs, bl.PlainStepMs))})
	ag, bag := s.PhaseMs[slices.Index(phaseNames, "all_gather")], bl.PhaseMs["all_gather"]
	ts = append(ts, target{Name: "all-gather at most 0.55x the baseline's BF16 all-gather", OK: bag > 0 && ag <= 0.55*bag,
		Detail: fmt.Sprintf("%.3f ms vs %.3f ms (%s)", ag, bag, ratio(ag, bag))})
	return ts
}

// expectedNorm is the gradient norm the model predicts for the average of
// d ranks' independent gradients.
func expectedNorm(m gradModel, params []optimizer.Param, d int) float64 {
	return math.Sqrt(m.expectedSquare(params) / float64(d))
}
