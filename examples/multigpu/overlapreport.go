package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/distopt/distopt/plan/barplot"
)

// overlapResult is the summary of -compute gemm over all ranks.
type overlapResult struct {
	// Medians: the largest median of each pass over the ranks, and the
	// accounting of those (see worst).
	Medians    exposure         `json:"medians"`
	HostSyncs  float64          `json:"host_syncs"` // the largest per overlapped iteration
	Tokens     int              `json:"tokens"`
	Micro      int              `json:"micro_batches"`
	Iterations int              `json:"iterations"`
	Baseline   *overlapBaseline `json:"baseline,omitempty"`
}

// overlapBaseline is what scripts/bench/torch_overlap.py writes with
// --json: the same passes in PyTorch (torch._scaled_mm of the same shapes,
// async NCCL collectives).
type overlapBaseline struct {
	World   int      `json:"world"`
	Params  int64    `json:"params"`
	Tokens  int      `json:"tokens"`
	Medians exposure `json:"medians"` // slowest rank's medians, accounted as ours
	Torch   string   `json:"torch"`
	NCCL    string   `json:"nccl"`
}

func readOverlapBaseline(path string) (*overlapBaseline, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var bl overlapBaseline
	if err := json.Unmarshal(b, &bl); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if bl.World < 1 || bl.Medians.Compute <= 0 {
		return nil, fmt.Errorf("%s: not a torch_overlap.py result (world %d, compute %g ms)", path, bl.World, bl.Medians.Compute)
	}
	m := bl.Medians
	bl.Medians = account(m.Compute, m.Comm, m.Step, m.Iteration)
	return &bl, nil
}

// reportOverlap is report for -compute gemm.
func reportOverlap(o options, s *summary, w io.Writer) error {
	r := &overlapResult{Tokens: s.Ranks[0].Overlap.Tokens, Micro: s.Ranks[0].Overlap.Micro, Iterations: s.Ranks[0].Overlap.Passes}
	var ms []exposure
	for _, rk := range s.Ranks {
		ms = append(ms, rk.Overlap.Medians)
		r.HostSyncs = max(r.HostSyncs, rk.Overlap.HostSyncs)
	}
	r.Medians = worst(ms)
	if o.baseline != "" {
		bl, err := readOverlapBaseline(o.baseline)
		if err != nil {
			return err
		}
		r.Baseline = bl
	}
	s.Overlap = r
	fmt.Fprintf(w, "\n== summary: %d parameters on %d ranks (%s), FP8 GEMMs of every linear layer, %d tokens x %d micro-batches per step\n",
		s.Params, s.World, s.Ranks[0].Backend, r.Tokens, r.Micro)
	fmt.Fprintf(w, "medians over %d iterations per pass, slowest rank (ms):\n", r.Iterations)
	fmt.Fprintf(w, "%-24s %10s %10s %10s %10s %12s %10s %10s %10s\n", "", "compute", "comm", "step", "optimizer", "overlapped", "exposed", "of comm", "overhead")
	row := func(name string, e exposure) {
		fmt.Fprintf(w, "%-24s %10.3f %10.3f %10.3f %10.3f %12.3f %10.3f %9.1f%% %+9.1f%%\n", name, e.Compute, e.Comm, e.Step, e.Optimizer,
			e.Iteration, e.Exposed, 100*e.ExposedFraction(), 100*e.Overhead())
	}
	row("distopt", r.Medians)
	if bl := r.Baseline; bl != nil {
		row("PyTorch (torch_overlap)", bl.Medians)
	}
	fmt.Fprintln(w, "(step: the step alone; optimizer = step - comm; exposed = overlapped - compute - optimizer; overhead = overlapped / (compute + optimizer) - 1)")
	g, want := s.Ranks[0].GradNorm, s.Ranks[0].ExpectedGradNorm
	fmt.Fprintf(w, "host waits for the GPU per overlapped iteration: %.2f\n", r.HostSyncs)
	s.Targets = append(overlapTargets(s.World, r), target{Name: "the GEMMs' weight gradients reach the optimizer: gradient norm within 10% of the operands' prediction",
		OK: math.Abs(g/want-1) <= 0.1, Detail: fmt.Sprintf("norm of the last step %.5g, predicted %.5g (%+.1f%%)", g, want, 100*(g/want-1))})
	for _, t := range s.Targets {
		mark := "ok  "
		switch {
		case t.NA:
			mark = "n/a "
		case !t.OK:
			mark = "MISS"
		}
		fmt.Fprintf(w, "[%s] %s: %s\n", mark, t.Name, t.Detail)
	}
	return writeOut(o, s, w)
}

// overlapTargets evaluates issue 15's goals on r.
func overlapTargets(world int, r *overlapResult) []target {
	m := r.Medians
	exposed := target{Name: "exposed communication at most 10% of the communication time (when compute >= communication)",
		OK: m.Exposed <= 0.1*m.Comm, Detail: fmt.Sprintf("exposed %.3f ms of %.3f ms (%.1f%%); compute %.3f ms", m.Exposed, m.Comm, 100*m.ExposedFraction(), m.Compute)}
	if m.Compute < m.Comm {
		exposed.NA, exposed.OK = true, false
		exposed.Detail = fmt.Sprintf("not applicable: compute %.3f ms < communication %.3f ms (exposed %.3f ms, %.1f%%)", m.Compute, m.Comm, m.Exposed, 100*m.ExposedFraction())
	}
	ts := []target{exposed, {Name: "iteration within 5% of compute + the optimizer's own work", OK: m.Overhead() <= 0.05,
		Detail: fmt.Sprintf("%.3f ms vs %.3f + %.3f = %.3f ms (%+.1f%%)", m.Iteration, m.Compute, m.Optimizer, m.Compute+m.Optimizer, 100*m.Overhead())}}
	bl := r.Baseline
	if bl == nil {
		return ts
	}
	if bl.World != world || bl.Tokens != r.Tokens {
		return append(ts, target{Name: "baseline", NA: true, Detail: fmt.Sprintf("the baseline ran %d ranks and %d tokens, distopt %d and %d: not compared", bl.World, bl.Tokens, world, r.Tokens)})
	}
	b := bl.Medians
	return append(ts,
		target{Name: "overlapped iteration no slower than PyTorch's", OK: m.Iteration <= b.Iteration,
			Detail: fmt.Sprintf("%.3f ms vs %.3f ms (%s)", m.Iteration, b.Iteration, ratio(m.Iteration, b.Iteration))},
		target{Name: "exposed communication no more than PyTorch's", OK: m.Exposed <= max(b.Exposed, 0),
			Detail: fmt.Sprintf("%.3f ms vs %.3f ms (communication alone %.3f vs %.3f ms)", m.Exposed, b.Exposed, m.Comm, b.Comm)})
}

// overlapSeries are the segments of the step chart in -compute gemm.
var overlapSeries = []string{"compute (FP8 GEMMs)", "optimizer (its own work)", "communication (exposed)"}

// overlapBars returns the step chart's bars of r: per implementation the
// overlapped iteration (compute, optimizer, exposed communication) and the
// same without overlap (compute, optimizer, all the communication). A
// negative exposed time (noise) is drawn as 0.
func overlapBars(world int, r *overlapResult) []barplot.Bar {
	bars := func(name string, e exposure) []barplot.Bar {
		return []barplot.Bar{
			{Label: fmt.Sprintf("%s overlapped (%.1f ms)", name, e.Iteration), Values: []float64{e.Compute, max(0, e.Optimizer), max(0, e.Exposed)}},
			{Label: fmt.Sprintf("%s, compute then step (%.1f ms)", name, e.Compute+e.Step), Values: []float64{e.Compute, max(0, e.Optimizer), e.Comm}},
		}
	}
	out := bars("distopt", r.Medians)
	if bl := r.Baseline; bl != nil && bl.World == world {
		out = append(out, bars("PyTorch", bl.Medians)...)
	}
	return out
}
