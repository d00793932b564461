package gemm

import (
	"github.com/distopt/distopt/internal/cublaslt"
	icuda "github.com/distopt/distopt/internal/cuda"
)

// SetAutotune makes the engine keep up to n of cuBLASLt's heuristic
// proposals for each plan it creates from now on, and time them on the
// plan's first call whose output is overwritten (Accumulate false: the
// candidates all write the same product, so the output stays right),
// keeping the fastest for every later call. n <= 1 (the default) keeps the
// heuristic's first choice. Tuning synchronizes the stream once per plan.
func (e *Engine) SetAutotune(n int) { e.tune = n }

// tuneRuns is how many timed runs each candidate gets, after one untimed.
const tuneRuns = 3

// autotune times every candidate of pl on args and keeps the fastest;
// candidates that fail are skipped.
func (e *Engine) autotune(pl *cublaslt.Plan, args *cublaslt.Args) error {
	start, err := e.d.NewEvent(true)
	if err != nil {
		return err
	}
	defer start.Destroy()
	end, err := e.d.NewEvent(true)
	if err != nil {
		return err
	}
	defer end.Destroy()
	best, bestTime := 0, -1.0
	for i := range pl.Candidates() {
		pl.Use(i)
		t, err := e.timeRuns(pl, args, start, end)
		if err != nil {
			continue
		}
		if bestTime < 0 || t < bestTime {
			best, bestTime = i, t
		}
	}
	pl.Use(best)
	return nil
}

// timeRuns runs pl once, then tuneRuns times between start and end, and
// returns the seconds the timed runs took.
func (e *Engine) timeRuns(pl *cublaslt.Plan, args *cublaslt.Args, start, end *icuda.Event) (float64, error) {
	if err := pl.Run(e.s, args); err != nil {
		return 0, err
	}
	if err := start.Record(e.s); err != nil {
		return 0, err
	}
	for range tuneRuns {
		if err := pl.Run(e.s, args); err != nil {
			return 0, err
		}
	}
	if err := end.Record(e.s); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	dt, err := icuda.Elapsed(start, end)
	return dt.Seconds(), err
}
