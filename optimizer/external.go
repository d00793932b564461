package optimizer

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// This file holds gradients lent by the caller (Config.ExternalGradients):
// a framework whose backward pass writes every bucket's gradient into
// buffers of its own, in the layout's order and padding, binds them for
// one step instead of copying them into buffers the optimizer would hold
// all the time. The step reads them in place: the reduce-scatter (in place,
// as with the optimizer's own buffers), the norm and the update.

// ErrUnbound marks a gradient access under Config.ExternalGradients with no
// buffers bound (BindGrads) for the coming step.
var ErrUnbound = errors.New("no gradient buffers bound (BindGrads)")

// BindGrads lends the optimizer the gradient of every bucket for the next
// Step or StepAsync, which reads them in place and unbinds them when it
// returns (successful or not). grads[b] is bucket b's full gradient
// (Layout().Buckets[b]): Size elements of Config.GradType, each
// parameter's at its Places offset, in the backend's memory kind. Every
// rank binds its own gradients; the step averages them. The padding
// between parameters is read like any gradient: the caller writes zeros
// there.
//
// The optimizer does not free the buffers. On a device backend the step's
// kernels may read them after StepAsync returns, and WaitGathers makes only
// the device wait: keep them until a synchronous Step has returned or the
// backend's Sync. A step captured in a CUDA graph keeps the addresses it
// read, so a graph replays only with the same buffers lent again, and the
// CUDA backend keeps one device table per set of addresses (up to 64
// before it drops them all): lend the same buffers each step where the
// framework can. Binding counts as a gradient write; Grad and SetGrad then
// view and write the bound buffers. Not concurrent with other methods.
//
// Errors: ErrConfig without ExternalGradients, or when the number of
// buffers, a size, a memory kind or a GPU is wrong (nothing is bound then);
// ErrGradReady when a reduce-scatter of this step is already in flight.
func (o *Optimizer) BindGrads(grads []buffer.Buffer) error {
	if err := o.usable(); err != nil {
		return err
	}
	if !o.cfg.ExternalGradients {
		return fmt.Errorf("optimizer: BindGrads without Config.ExternalGradients (the optimizer holds its own gradient buffers): %w", ErrConfig)
	}
	if len(grads) != len(o.buckets) {
		return fmt.Errorf("optimizer: BindGrads: %d buffers for %d buckets: %w", len(grads), len(o.buckets), ErrConfig)
	}
	kind := o.backend.Memory()
	dev, onDevice := o.backend.(backend.OnDevice)
	for b, g := range grads {
		want := o.buckets[b].b.Size * o.cfg.GradType.Size()
		switch {
		case g == nil:
			return fmt.Errorf("optimizer: BindGrads: bucket %d's buffer is nil: %w", b, ErrConfig)
		case g.Len() != want:
			return fmt.Errorf("optimizer: BindGrads: bucket %d's buffer holds %d bytes, want %d (%d elements of %s): %w", b, g.Len(), want, o.buckets[b].b.Size, o.cfg.GradType, ErrConfig)
		case g.Memory() != kind:
			return fmt.Errorf("optimizer: BindGrads: bucket %d's buffer is in %s memory, the backend's is %s: %w", b, g.Memory(), kind, ErrConfig)
		}
		if d, ok := g.(buffer.DeviceBuffer); ok && onDevice && d.Device != dev.Ordinal() {
			return fmt.Errorf("optimizer: BindGrads: bucket %d's buffer is on GPU %d, the backend's is GPU %d: %w", b, d.Device, dev.Ordinal(), ErrConfig)
		}
		if err := o.inFlight(b, "BindGrads"); err != nil {
			return err
		}
	}
	for b, bk := range o.buckets {
		bk.grad = grads[b]
	}
	o.bound.Store(true)
	o.markGrad()
	return nil
}

// needGrads returns ErrUnbound when the gradients are lent by the caller
// and none are bound; call names the method, and param, unless empty, the
// parameter it was called for (the message is made only on error: SetGrad
// and GradReady run once per parameter and micro-batch).
func (o *Optimizer) needGrads(call, param string) error {
	if !o.cfg.ExternalGradients || o.bound.Load() {
		return nil
	}
	if param != "" {
		call = fmt.Sprintf("%s(%q)", call, param)
	}
	return fmt.Errorf("optimizer: %s: %w", call, ErrUnbound)
}

// unbind forgets the lent gradient buffers at the end of a step.
func (o *Optimizer) unbind() {
	if !o.cfg.ExternalGradients {
		return
	}
	for _, bk := range o.buckets {
		bk.grad = nil
	}
	o.bound.Store(false)
}
