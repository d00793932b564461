package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/optimizer"
)

// This file holds the training iteration of -compute gemm: a forward pass
// through the parameters in the order the model uses them, a backward pass
// in the reverse order, and the optimizer's overlapped step, written
// against a computer (the FP8 GEMMs on a GPU, gemmCompute; a recorder in
// the tests) so that the order of the calls can be checked without a GPU.

// computer runs the model's work for one parameter on the optimizer
// backend's queue (on a GPU its stream), without waiting for it.
type computer interface {
	// Forward runs the forward product of GEMM parameter i, reading its
	// gathered weight w.
	Forward(i int, w optimizer.ParamView) error
	// Backward runs the data- and weight-gradient products of GEMM
	// parameter i, reading w and writing the weight gradient into g (added
	// to what g holds when accumulate is set).
	Backward(i int, w optimizer.ParamView, g optimizer.GradView, accumulate bool) error
	// WriteGrad writes the gradient of parameter i that no GEMM makes
	// (embeddings, norms, biases) into g: a write of g's size.
	WriteGrad(i int, g optimizer.GradView, accumulate bool) error
}

// isGEMM reports whether parameter p is the weight of a linear layer whose
// products the iteration runs: a 2-D FP8 matrix other than the embeddings
// (their forward is a lookup, their backward a scatter).
func isGEMM(p optimizer.Param) bool {
	return !p.HighPrecision && len(p.Shape) == 2 && !strings.HasPrefix(p.Name, "embed.")
}

// iterKind is what one iteration runs.
type iterKind int

const (
	// iterCompute: forward and backward alone, no GradReady, no step (the
	// compute time).
	iterCompute iterKind = iota
	// iterStep: the step alone: every gradient declared ready at once, then
	// StepAsync (communication and the optimizer's own work, nothing to
	// hide them behind).
	iterStep
	// iterOverlap: forward (waiting for each parameter's gather), backward
	// (GradReady as each gradient completes), StepAsync: the training
	// iteration.
	iterOverlap
)

func (k iterKind) String() string {
	return [...]string{"compute", "step", "overlapped"}[k]
}

// pipeline is what the iteration calls of the optimizer
// (*optimizer.Optimizer; the tests wrap it to log the calls).
type pipeline interface {
	WaitParam(ctx context.Context, name string) error
	WaitGathers(ctx context.Context) error
	Param(name string) (optimizer.ParamView, error)
	Grad(name string) (optimizer.GradView, error)
	GradReady(name string) error
	StepAsync(ctx context.Context) (optimizer.StepResult, error)
	LastResult() (optimizer.StepResult, error)
	Backend() backend.Backend
}

// trainer runs iterations of one rank.
type trainer struct {
	opt    pipeline
	params []optimizer.Param // in forward order (the optimizer's)
	comp   computer
	micro  int // micro-batches per step (Config.MicroBatches)
}

// iteration runs one iteration of kind k.
func (t *trainer) iteration(ctx context.Context, k iterKind) error {
	if k == iterStep {
		// The forward pass would wait for the gathers of the last step.
		if err := t.opt.WaitGathers(ctx); err != nil {
			return err
		}
		for range t.micro {
			for i := len(t.params) - 1; i >= 0; i-- {
				if err := t.opt.GradReady(t.params[i].Name); err != nil {
					return err
				}
			}
		}
		return t.step(ctx)
	}
	for m := range t.micro {
		if err := t.forward(ctx); err != nil {
			return err
		}
		if err := t.backward(k == iterOverlap, m > 0); err != nil {
			return err
		}
	}
	if k == iterOverlap {
		return t.step(ctx)
	}
	return nil
}

// step takes the overlapped step; a skipped step is an error (the
// gradients of the iteration are finite by construction).
func (t *trainer) step(ctx context.Context) error {
	res, err := t.opt.StepAsync(ctx)
	if err != nil {
		return err
	}
	if res.Skipped {
		return fmt.Errorf("step %d skipped: %s", res.Step, res.Reason)
	}
	return nil
}

// forward visits the parameters in forward order: each waits for its
// bucket's gather (WaitParam: on a GPU the stream waits, not the host)
// before the GEMM reads it through Param.
func (t *trainer) forward(ctx context.Context) error {
	for i, p := range t.params {
		if err := t.opt.WaitParam(ctx, p.Name); err != nil {
			return err
		}
		if !isGEMM(p) {
			continue
		}
		w, err := t.opt.Param(p.Name)
		if err != nil {
			return err
		}
		if err := t.comp.Forward(i, w); err != nil {
			return fmt.Errorf("forward of %s: %w", p.Name, err)
		}
	}
	return nil
}

// backward visits the parameters in reverse order: the gradient of each is
// written (by its weight-gradient GEMM, or a write of its size), then, when
// ready is set, declared ready, which starts a bucket's reduce-scatter once
// all its parameters are.
func (t *trainer) backward(ready, accumulate bool) error {
	for i := len(t.params) - 1; i >= 0; i-- {
		p := t.params[i]
		g, err := t.opt.Grad(p.Name)
		if err != nil {
			return err
		}
		if isGEMM(p) {
			w, err := t.opt.Param(p.Name)
			if err != nil {
				return err
			}
			err = t.comp.Backward(i, w, g, accumulate)
			if err != nil {
				return fmt.Errorf("backward of %s: %w", p.Name, err)
			}
		} else if err := t.comp.WriteGrad(i, g, accumulate); err != nil {
			return fmt.Errorf("gradient of %s: %w", p.Name, err)
		}
		if ready {
			if err := t.opt.GradReady(p.Name); err != nil {
				return err
			}
		}
	}
	return nil
}
