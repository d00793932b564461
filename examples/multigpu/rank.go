package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// runRank makes the gradients, the optimizer, and takes the steps.
func runRank(ctx context.Context, j *job, o options, workers int, out io.Writer) (*rankSummary, error) {
	if o.compute == "gemm" {
		return runComputeRank(ctx, j, o, out)
	}
	params := o.gpt.Params()
	cfg := o.config()
	pred, err := optimizer.PredictMemory(params, j.size, cfg)
	if err != nil {
		return nil, err
	}
	pool := makeGradients(j, o, params, workers, out)
	sync := &phaseSync{Backend: j.be, Comm: j.comm, Ctx: ctx}
	opt, err := optimizer.New(ctx, j.comm, timedBackend(sync), params, initValues(o.gpt.Layers), cfg)
	if err != nil {
		return nil, err
	}
	defer opt.Close()
	sync.Updates = len(opt.Layout().Buckets)
	if got := opt.Report().Total(); got != pred.Total() {
		return nil, fmt.Errorf("the optimizer reports %d bytes, PredictMemory %d", got, pred.Total())
	}
	s := &rankSummary{Rank: j.rank, World: j.size, Backend: j.be.Name(), Params: o.gpt.NumParams(), Predicted: pred.Total(), Buffers: pred.Buffers,
		ExpectedGradNorm: expectedNorm(o.grads, params, j.size)}
	r := &rankRun{j: j, o: o, opt: opt, sync: sync, mem: newMemRecord(j), pool: pool, pred: pred.Total(), out: out}
	r.mem.afterOptimizer = j.sample()
	if s.BarrierMs, err = timeBarrier(ctx, j.comm, 20); err != nil {
		return nil, err
	}
	for _, p := range params {
		r.names = append(r.names, p.Name)
	}
	if err := r.takeSteps(ctx, s); err != nil {
		return nil, err
	}
	r.summarise(s)
	return s, nil
}

// makeGradients draws o.pool gradient sets of params for this rank, and
// says how long it took.
func makeGradients(j *job, o options, params []optimizer.Param, workers int, out io.Writer) [][][]byte {
	t0 := time.Now()
	pool := make([][][]byte, o.pool)
	for k := range pool {
		pool[k] = o.grads.generate(params, gradSeed(o.seed, j.rank, k), workers)
	}
	fmt.Fprintf(out, "%d parameters, %d ranks, %s; %d gradient sets made in %.1fs\n",
		o.gpt.NumParams(), j.size, j.be.Name(), o.pool, time.Since(t0).Seconds())
	return pool
}

// rankRun is one rank's steps on generated gradients and what they
// measured.
type rankRun struct {
	j     *job
	o     options
	opt   *optimizer.Optimizer
	sync  *phaseSync
	mem   *memRecord
	pool  [][][]byte // gradient sets, used in turn
	names []string   // the parameters, in order
	pred  int64      // the predicted bytes of the optimizer
	out   io.Writer

	timed [][]float64 // the phases of each timed step, in ms
	plain []float64   // the wall time of each plain step, in ms
}

// takeSteps takes the warm-up, timed and plain steps, printing a line
// each; s gets the last gradient norm.
func (r *rankRun) takeSteps(ctx context.Context, s *rankSummary) error {
	o := r.o
	total := o.warmup + o.steps + o.plainSteps
	for step := range total {
		r.sync.On = step < o.warmup+o.steps
		res, wall, uploadTime, err := r.step(ctx, step)
		if err != nil {
			return err
		}
		ph := phases(res.Timings)
		kind := "warm-up"
		switch {
		case step >= o.warmup+o.steps:
			kind = "plain"
			r.plain = append(r.plain, wall)
		case step >= o.warmup:
			kind = "timed"
			r.timed = append(r.timed, ph)
		}
		used := r.mem.step(r.j)
		s.GradNorm = res.GradNorm
		fmt.Fprintf(r.out, "step %3d/%d %-7s rs %6.2f  norm %5.2f  update %6.2f  amax %5.2f  cast %5.2f  ag %6.2f = %7.2f ms (wall %7.2f) | grad norm %.4g | upload %4.0f ms%s\n",
			step+1, total, kind, ph[0], ph[1], ph[2], ph[3], ph[4], ph[5], sum(ph), wall, res.GradNorm,
			float64(uploadTime)/float64(time.Millisecond), r.mem.line(used, r.pred))
	}
	return nil
}

// step uploads the step's gradient set and takes the step: its result, its
// wall time in ms and the upload's time. A skipped step is an error.
func (r *rankRun) step(ctx context.Context, step int) (optimizer.StepResult, float64, time.Duration, error) {
	tu := time.Now()
	if err := upload(r.opt, r.names, r.pool[step%len(r.pool)], r.o.shardedGrads); err != nil {
		return optimizer.StepResult{}, 0, 0, err
	}
	uploadTime := time.Since(tu)
	// Every rank starts the step together: the uploads take unequal
	// times, and the first collective would count the difference.
	if err := collective.Barrier(ctx, r.j.comm); err != nil {
		return optimizer.StepResult{}, 0, 0, err
	}
	ts := time.Now()
	res, err := r.opt.Step(ctx)
	if err != nil {
		return optimizer.StepResult{}, 0, 0, err
	}
	wall := float64(time.Since(ts)) / float64(time.Millisecond)
	if res.Skipped {
		return optimizer.StepResult{}, 0, 0, fmt.Errorf("step %d skipped: %s", step+1, res.Reason)
	}
	return res, wall, uploadTime, nil
}

// summarise sets s's median phases, step times and memory.
func (r *rankRun) summarise(s *rankSummary) {
	s.PhaseMs = make([]float64, len(phaseNames))
	var sums []float64
	for i := range phaseNames {
		col := make([]float64, len(r.timed))
		for k, ph := range r.timed {
			col[k] = ph[i]
		}
		s.PhaseMs[i] = median(col)
	}
	for _, ph := range r.timed {
		sums = append(sums, sum(ph))
	}
	s.StepMs, s.PlainStepMs = median(sums), median(r.plain)
	s.Memory = r.mem.summary(r.j)
}
