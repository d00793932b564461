package gomlxinterop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
)

// Forward runs forward and backward on one batch and hands the gradients
// to distopt: it lends the graph's bucket outputs to the step
// (optimizer.BindGrads), or with GPUConfig.CopyGradients copies them into
// distopt's gradient views (on a GPU device to device, on distopt's
// stream). It returns the loss. Update must follow before the next Forward.
func (t *weightTrainer) Forward(b Batch) (float32, error) {
	if t.grads != nil {
		return 0, fmt.Errorf("%w: Forward called twice without Update", ErrHandOver)
	}
	start := time.Now()
	loss, grads, err := t.exec.Exec(b.Inputs, b.Labels, t.weights)
	if err != nil {
		return 0, err
	}
	t.grads = grads
	l := tensors.ToScalar[float32](loss) // waits for the execution
	loss.FinalizeAll()
	synced := time.Now()
	err = t.dev.sync()
	copied := time.Now()
	if err == nil {
		err = t.handGrads()
	}
	t.timing.Compute += synced.Sub(start)
	t.timing.Sync += copied.Sub(synced)
	t.timing.Copy += time.Since(copied)
	return l, err
}

// handGrads lends the gradient outputs to the step, or copies them.
func (t *weightTrainer) handGrads() error {
	if !t.opt.Config().ExternalGradients {
		return t.copyGrads()
	}
	bufs, err := t.dev.lend(t.grads)
	if err != nil {
		return err
	}
	return t.opt.BindGrads(bufs)
}

// copyGrads copies every gradient into its view, after checking its size.
func (t *weightTrainer) copyGrads() error {
	dst := make([]buffer.Buffer, len(t.params))
	for i, p := range t.params {
		v, err := t.opt.Grad(p.Name)
		if err != nil {
			return err
		}
		g := t.grads[i]
		if n := g.Shape().Memory(); int(n) != v.Data.Len() {
			return fmt.Errorf("%w: gradient of %q is %s (%d bytes), distopt's view holds %d bytes of %v", ErrHandOver, p.Name, g.Shape(), n, v.Data.Len(), v.DType)
		}
		dst[i] = v.Data
	}
	return t.dev.copyGrads(dst, t.grads)
}

// Update runs distopt's step (collective: all ranks together) on the
// gradients of the last Forward, waits for its gathers and stream, and
// releases the gradients: after the wait, since the step's kernels read
// lent outputs in place.
func (t *weightTrainer) Update(ctx context.Context) (optimizer.StepResult, error) {
	if t.grads == nil {
		return optimizer.StepResult{}, fmt.Errorf("%w: Update without Forward", ErrHandOver)
	}
	start := time.Now()
	res, err := t.opt.Step(ctx)
	if err == nil {
		err = t.opt.WaitGathers(ctx)
	}
	if err == nil {
		err = t.dev.refresh()
	} else {
		// The gradient copies may still be reading the buffers freed below.
		err = errors.Join(err, t.dev.sync())
	}
	for _, g := range t.grads {
		g.FinalizeAll() // the copies have completed: the stream was waited for
	}
	t.grads = nil
	t.timing.Update += time.Since(start)
	t.timing.Steps++
	return res, err
}

// Eval returns the loss of the model on batch b with the current weights
// (the gradients computed alongside are dropped, the optimizer is not
// touched). Not between Forward and Update.
func (t *weightTrainer) Eval(b Batch) (float32, error) {
	if t.grads != nil {
		return 0, fmt.Errorf("%w: Eval between Forward and Update", ErrHandOver)
	}
	loss, grads, err := t.exec.Exec(b.Inputs, b.Labels, t.weights)
	if err != nil {
		return 0, err
	}
	l := tensors.ToScalar[float32](loss)
	loss.FinalizeAll()
	for _, g := range grads {
		g.FinalizeAll()
	}
	return l, nil
}

// Step is Forward and Update: one training step on this rank's batch.
func (t *weightTrainer) Step(ctx context.Context, b Batch) (float32, optimizer.StepResult, error) {
	l, err := t.Forward(b)
	if err != nil {
		return 0, optimizer.StepResult{}, err
	}
	res, err := t.Update(ctx)
	return l, res, err
}

// Grads returns the gradients of the last Forward (the graph's outputs, in
// distopt's layout and gradient type: one per bucket when lent, else one
// per parameter); valid until Update.
func (t *weightTrainer) Grads() []*tensors.Tensor { return t.grads }

// Timing returns the accumulated timings.
func (t *weightTrainer) Timing() Timing { return t.timing }

// Params returns the parameters, in gradient order.
func (t *weightTrainer) Params() []Param { return t.params }

// Optimizer returns the rank's optimizer.
func (t *weightTrainer) Optimizer() *optimizer.Optimizer { return t.opt }

// WeightGradExec returns the graph's executor.
func (t *weightTrainer) WeightGradExec() *WeightGradExec { return t.exec }

// Weights returns the graph's weight inputs, in WeightGradExec's order
// (views of distopt's buffers, or copies of them).
func (t *weightTrainer) Weights() []*tensors.Tensor {
	return append([]*tensors.Tensor(nil), t.weights...)
}

// Close releases the weight inputs, the placeholders' memory and the
// optimizer.
func (t *weightTrainer) Close() error {
	var errs []error
	for _, g := range t.grads {
		errs = append(errs, g.FinalizeAll())
	}
	for _, w := range t.weights {
		errs = append(errs, w.FinalizeAll())
	}
	for _, p := range t.params {
		if p.Var.HasValue() {
			errs = append(errs, p.Var.Reset())
		}
	}
	if t.exec != nil {
		t.exec.Finalize()
	}
	errs = append(errs, t.opt.Close(), t.dev.close())
	return errors.Join(errs...)
}
