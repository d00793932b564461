package main

import (
	"context"
	"fmt"
	"time"

	"github.com/distopt/distopt/collective"
)

// This file measures -compute gemm: four passes of iterations, each timed
// by marks in the backend's queue (CUDA events on a GPU), and the
// accounting of exposed communication from them.

// clock marks points in the backend's queue without waiting for it.
type clock interface {
	// Mark records the point the queue has reached.
	Mark() error
	// Read waits for the queue and returns the milliseconds between
	// consecutive marks since the last Read, then forgets the marks.
	Read() ([]float64, error)
}

// hostClock is the clock of a backend whose work is done when its calls
// return (the CPU backend): the host's time.
type hostClock struct{ marks []time.Time }

func (c *hostClock) Mark() error { c.marks = append(c.marks, time.Now()); return nil }

func (c *hostClock) Read() ([]float64, error) {
	ms := intervals(len(c.marks), func(i int) float64 {
		return float64(c.marks[i+1].Sub(c.marks[i])) / float64(time.Millisecond)
	})
	c.marks = c.marks[:0]
	return ms, nil
}

// intervals returns f(i) for i < n-1 (nothing for fewer than two marks).
func intervals(n int, f func(i int) float64) []float64 {
	var ms []float64
	for i := 0; i+1 < n; i++ {
		ms = append(ms, f(i))
	}
	return ms
}

// overlapRank is one rank's measurement of -compute gemm, in milliseconds:
// per iteration of each pass, and their medians.
type overlapRank struct {
	ComputeMs []float64 `json:"compute_ms"`    // forward and backward alone
	CommMs    []float64 `json:"comm_ms"`       // the step's collectives alone (replayed)
	StepMs    []float64 `json:"step_ms"`       // the step alone: collectives and the optimizer's kernels, nothing to hide behind
	IterMs    []float64 `json:"iteration_ms"`  // the overlapped iteration
	HostSyncs float64   `json:"host_syncs"`    // host waits for the GPU per overlapped iteration
	Medians   exposure  `json:"medians"`       // of each pass, and what follows from them
	Iteration []float64 `json:"exposed_ms"`    // per overlapped iteration k: IterMs[k] - ComputeMs[k] - (StepMs[k] - CommMs[k])
	Passes    int       `json:"iterations"`    // iterations per pass
	Tokens    int       `json:"tokens"`        // per micro-batch
	Micro     int       `json:"micro_batches"` // per step
}

// exposure is the accounting of one measurement, in milliseconds:
// Optimizer = Step - Comm (the optimizer's own work: norm, update, amax,
// cast kernels and its host time, what the step costs without its
// collectives) and Exposed = Iteration - Compute - Optimizer (the
// communication the overlapped iteration did not hide: Comm when nothing
// is hidden, 0 when everything is).
type exposure struct {
	Compute   float64 `json:"compute"`
	Comm      float64 `json:"comm"`
	Step      float64 `json:"step"`
	Iteration float64 `json:"iteration"`
	Optimizer float64 `json:"optimizer"`
	Exposed   float64 `json:"exposed"`
}

// account derives Optimizer and Exposed from the four measured times.
func account(compute, comm, step, iteration float64) exposure {
	opt := step - comm
	return exposure{Compute: compute, Comm: comm, Step: step, Iteration: iteration, Optimizer: opt, Exposed: iteration - compute - opt}
}

// ExposedFraction is Exposed / Comm (0 without communication).
func (e exposure) ExposedFraction() float64 {
	if e.Comm <= 0 {
		return 0
	}
	return e.Exposed / e.Comm
}

// Overhead is how much longer the iteration is than compute plus the
// optimizer's own work, as a fraction of that sum.
func (e exposure) Overhead() float64 {
	base := e.Compute + e.Optimizer
	if base <= 0 {
		return 0
	}
	return e.Iteration/base - 1
}

// worst combines ranks' medians: the largest of each measured time, and
// the accounting of those.
func worst(rs []exposure) exposure {
	var c, m, s, it float64
	for _, r := range rs {
		c, m, s, it = max(c, r.Compute), max(m, r.Comm), max(s, r.Step), max(it, r.Iteration)
	}
	return account(c, m, s, it)
}

// measurer runs the passes of one rank.
type measurer struct {
	t     *trainer
	rec   *recorder
	clk   clock
	syncs func() int64 // host waits for the device so far (nil: not counted)
	n     int          // timed iterations per pass

	idleSyncs int64 // host waits of the last pass's finish
}

// run takes warmup overlapped iterations (the last one recorded: its
// collectives are what the communication pass replays), then the four
// passes, and returns their times.
func (m *measurer) run(ctx context.Context, warmup int) (*overlapRank, error) {
	if warmup < 1 {
		return nil, fmt.Errorf("-compute gemm needs at least one warm-up step (its collectives are replayed), got %d", warmup)
	}
	for k := range warmup {
		m.rec.record(k == warmup-1)
		if err := m.t.iteration(ctx, iterOverlap); err != nil {
			m.rec.record(false)
			return nil, fmt.Errorf("warm-up iteration %d: %w", k+1, err)
		}
	}
	m.rec.record(false)
	if len(m.rec.recorded()) == 0 {
		return nil, fmt.Errorf("the warm-up step started no collective")
	}
	r := &overlapRank{Passes: m.n, Micro: m.t.micro}
	var err error
	if r.ComputeMs, err = m.pass(ctx, iterCompute); err != nil {
		return nil, err
	}
	if r.CommMs, err = m.commPass(ctx); err != nil {
		return nil, err
	}
	if r.StepMs, err = m.pass(ctx, iterStep); err != nil {
		return nil, err
	}
	s0 := m.hostSyncs()
	if r.IterMs, err = m.pass(ctx, iterOverlap); err != nil {
		return nil, err
	}
	// The pass's own waits after its iterations (WaitGathers' settle, the
	// clock's read, the backend's Sync, the barrier) are not the loop's.
	r.HostSyncs = float64(m.hostSyncs()-s0-m.idleSyncs) / float64(m.n+2)
	r.Medians = account(median(r.ComputeMs), median(r.CommMs), median(r.StepMs), median(r.IterMs))
	for k := range r.IterMs {
		r.Iteration = append(r.Iteration, account(r.ComputeMs[k], r.CommMs[k], r.StepMs[k], r.IterMs[k]).Exposed)
	}
	return r, nil
}

func (m *measurer) hostSyncs() int64 {
	if m.syncs == nil {
		return 0
	}
	return m.syncs()
}

// pass runs n+2 iterations of kind k, the last n+1 with a mark at their
// start, and returns the n intervals: each iteration's time from its start
// to the next one's, in which the next iteration's waits for this one's
// collectives fall. The first iteration is not timed: it leaves the
// gathers in flight that a timed iteration waits for, as in training.
// Then the pass settles: the gathers waited for, the queue drained, every
// rank at a barrier.
func (m *measurer) pass(ctx context.Context, k iterKind) ([]float64, error) {
	for i := range m.n + 2 {
		if i > 0 {
			if err := m.clk.Mark(); err != nil {
				return nil, err
			}
		}
		if err := m.t.iteration(ctx, k); err != nil {
			return nil, fmt.Errorf("%s iteration %d: %w", k, i+1, err)
		}
	}
	return m.finish(ctx, nil)
}

// commPass replays the recorded step's collectives n times, marks between.
func (m *measurer) commPass(ctx context.Context) ([]float64, error) {
	var pending []collective.Work
	for i := range m.n + 1 {
		if err := m.clk.Mark(); err != nil {
			return nil, err
		}
		if i == m.n {
			break
		}
		ws, err := m.rec.replay(ctx, m.t.opt.Backend())
		pending = append(pending, ws...)
		if err != nil {
			return nil, err
		}
	}
	return m.finish(ctx, pending)
}

// finish ends a pass: the gathers in flight waited for, the clock read,
// the works the device waited for settled, every rank at a barrier. The
// host waits it makes are counted in idleSyncs.
func (m *measurer) finish(ctx context.Context, pending []collective.Work) ([]float64, error) {
	s0 := m.hostSyncs()
	defer func() { m.idleSyncs = m.hostSyncs() - s0 }()
	if err := m.t.opt.WaitGathers(ctx); err != nil {
		return nil, err
	}
	ms, err := m.clk.Read()
	if err != nil {
		return nil, err
	}
	if err := m.t.opt.Backend().Sync(); err != nil {
		return nil, err
	}
	if err := settle(ctx, pending); err != nil {
		return nil, err
	}
	if _, err := m.t.opt.LastResult(); err != nil { // the last step's decision, read now
		return nil, err
	}
	return ms, collective.Barrier(ctx, m.rec)
}
