package optimizertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// Overlap says how TrainOverlapped drives the optimizer's pipeline.
type Overlap struct {
	// MicroBatches is the number of backward passes per step (and the
	// Config.MicroBatches TrainOverlapped sets); 0 means 1.
	MicroBatches int
	// Shuffle declares the gradients ready in a random order, drawn anew
	// for every step, micro-batch and rank (the ranks disagree); without
	// it, in the backward order: the reverse of the parameter list.
	Shuffle bool
	// Sync takes the steps with Step, still declaring the gradients ready,
	// instead of StepAsync.
	Sync bool
}

// micro returns the number of micro-batches of ov.
func (ov Overlap) micro() int { return max(1, ov.MicroBatches) }

// Accumulated returns the GradFunc of a step accumulated over micro
// micro-batches: the float32 sum, in micro-batch order, of
// grad(p, step*micro+m, rank) for m in [0, micro), as TrainOverlapped's
// framework accumulates it. Accumulated(grad, 1) is grad.
func Accumulated(grad GradFunc, micro int) GradFunc {
	return func(p optimizer.Param, step, rank int) []float32 {
		var acc []float32
		for m := range micro {
			acc = accumulate(acc, grad(p, step*micro+m, rank))
		}
		return acc
	}
}

// accumulate adds g to acc element by element in float32 (acc nil: a copy
// of g) and returns acc.
func accumulate(acc, g []float32) []float32 {
	if acc == nil {
		return slices.Clone(g)
	}
	for i := range acc {
		acc[i] += g[i]
	}
	return acc
}

// TrainOverlapped is Train through the overlapped pipeline. Each step runs
// a "forward pass" that waits for every parameter in list order
// (WaitParam) and reads its view (Param), then ov.MicroBatches "backward
// passes": micro-batch m adds grad(p, step*micro+m, rank) to a float32
// accumulator, writes the sum into the gradient view (SetGrad) and
// declares it ready (GradReady), parameter after parameter in the order ov
// says; then StepAsync (Step with ov.Sync). The result after the last step
// (Collect, after WaitGathers) must therefore equal Train's fed
// Accumulated(grad, micro), bit for bit. A result StepAsync returns Pending
// is completed by LastResult after the next forward pass.
func TrainOverlapped(ctx context.Context, comm collective.Communicator, be backend.Backend, params []optimizer.Param, cfg optimizer.Config, steps int, grad GradFunc, ov Overlap) (Result, error) {
	cfg.MicroBatches = ov.micro()
	o, err := optimizer.New(ctx, comm, be, params, optimizer.FromMap(InitWeights(params, 1)), cfg)
	if err != nil {
		return Result{}, err
	}
	defer o.Close()
	var results []optimizer.StepResult
	for s := range steps {
		for _, p := range params {
			if err := o.WaitParam(ctx, p.Name); err != nil {
				return Result{}, fmt.Errorf("step %d: %w", s, err)
			}
			if _, err := o.Param(p.Name); err != nil {
				return Result{}, fmt.Errorf("step %d: %w", s, err)
			}
		}
		if err := lastResult(o, results); err != nil {
			return Result{}, fmt.Errorf("step %d: %w", s-1, err)
		}
		if err := backward(o, params, s, comm.Rank(), grad, ov); err != nil {
			return Result{}, fmt.Errorf("step %d: %w", s, err)
		}
		step := o.StepAsync
		if ov.Sync {
			step = o.Step
		}
		sr, err := step(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("step %d: %w", s, err)
		}
		results = append(results, sr)
	}
	if err := o.WaitGathers(ctx); err != nil {
		return Result{}, err
	}
	if err := lastResult(o, results); err != nil {
		return Result{}, err
	}
	res, err := Collect(o, params)
	res.Results = results
	return res, err
}

// backward runs the micro-batches of step s on rank: accumulate, write and
// declare each gradient.
func backward(o *optimizer.Optimizer, params []optimizer.Param, s, rank int, grad GradFunc, ov Overlap) error {
	micro := ov.micro()
	acc := make([][]float32, len(params))
	for m := range micro {
		order := make([]int, len(params))
		for i := range order {
			order[i] = len(params) - 1 - i
		}
		if ov.Shuffle {
			r := rand.New(rand.NewPCG(uint64(s*micro+m), uint64(rank)))
			r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for _, i := range order {
			p := params[i]
			acc[i] = accumulate(acc[i], grad(p, s*micro+m, rank))
			if err := o.SetGrad(p.Name, acc[i]); err != nil {
				return err
			}
			if err := o.GradReady(p.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// lastResult completes the last of results when StepAsync left it Pending
// (the step's decision on the device), from LastResult, keeping its
// timings; it is called before the next step, after the forward pass.
func lastResult(o *optimizer.Optimizer, results []optimizer.StepResult) error {
	if len(results) == 0 || !results[len(results)-1].Pending {
		return nil
	}
	r, err := o.LastResult()
	if err != nil {
		return err
	}
	if r.Pending {
		return fmt.Errorf("optimizertest: LastResult is still pending")
	}
	r.Timings = results[len(results)-1].Timings
	results[len(results)-1] = r
	return nil
}
