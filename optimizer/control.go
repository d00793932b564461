package optimizer

import (
	"context"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// This file holds the step control block: the decision of a step (norm,
// clip coefficient, skip) and the loss scaler, derived in the backend's own
// queue from the reduced gradient statistics (Backend.Control), read by the
// update and the cast there, and by the host only when it asks: at once in
// Step, later (LastResult, or the next step) in StepAsync on a backend that
// can read it back without waiting (AsyncReader: optimizer/gpu).

// control is the host's side of the control block.
type control struct {
	buf   buffer.Buffer       // the block, backend.ControlBytes in the backend's memory
	host  backend.Control     // the host's copy: exact unless pend is set
	dirty bool                // host was changed by the host: write it before the next step
	pend  backend.PendingRead // the last StepAsync's block, not read yet
	// waited is the number of the pipeline's device-waited works ordered
	// before the pending copy: they are complete when it has landed.
	waited int
	last   StepResult // the last step's result (complete unless pend is set)
}

// initControl allocates the control block; its content is written before
// the first step.
func (o *Optimizer) initControl() error {
	var err error
	o.control.buf, err = o.backend.Alloc(backend.ControlBytes)
	o.control.host = backend.Control{MaxNorm: o.cfg.MaxGradNorm, Scale: 1}
	o.control.dirty = true
	return err
}

// controlInputs sets the configuration and state fields of the host copy
// from the optimizer's (the step count, the loss scaler).
func (o *Optimizer) controlInputs() {
	c := &o.control.host
	c.MaxNorm, c.Step, c.Scale = o.cfg.MaxGradNorm, int64(o.step), 1
	if s := o.cfg.LossScaler; s != nil {
		c.Growth, c.Backoff, c.MinScale, c.MaxScale = s.GrowthFactor, s.BackoffFactor, s.MinScale, s.MaxScale
		c.Interval, c.Scale, c.Good = int64(s.GrowthInterval), s.scale, int64(s.good)
	}
}

// deferred reports whether this step leaves its decision on the device:
// StepAsync on an AsyncReader backend, with scales the backend derives
// itself (DeviceScaler; DelayedScaler for delayed scaling).
func (o *Optimizer) deferred(async bool) bool {
	if !async {
		return false
	}
	if _, ok := o.backend.(backend.AsyncReader); !ok {
		return false
	}
	if o.cfg.Recipe.ScaleSource() == fp8.FromHistory {
		return o.deviceHist != nil
	}
	_, ds := o.backend.(backend.DeviceScaler)
	return ds || o.nSlots == 0
}

// decide queues the control kernel over the reduced statistics (writing
// the block first when the host changed it). Unless deferred, it reads the
// block back and fills res; deferred, it counts the step as taken until
// the block is read (resolve).
func (o *Optimizer) decide(res *StepResult, deferred bool) error {
	if err := o.flushControl(); err != nil {
		return err
	}
	if err := o.backend.Control(o.control.buf, o.stats); err != nil {
		return o.fail(fmt.Errorf("optimizer: step control: %w", err))
	}
	if deferred {
		o.step++ // the factors of a taken step; resolve corrects a skip
		res.Step, res.Pending = o.step, true
		return nil
	}
	raw := make([]byte, backend.ControlBytes)
	if err := o.backend.Read(raw, o.control.buf, 0); err != nil {
		return o.fail(err)
	}
	c, err := backend.DecodeControl(raw)
	if err != nil {
		return o.fail(err)
	}
	o.apply(c, res)
	return nil
}

// flushControl writes the host's copy of the block when the host changed
// it (New, SetScalars): refresh calls it, so that a step finds it written.
func (o *Optimizer) flushControl() error {
	if !o.control.dirty {
		return nil
	}
	o.controlInputs()
	if err := o.backend.Write(o.control.buf, 0, o.control.host.Encode()); err != nil {
		return o.fail(err)
	}
	o.control.dirty = false
	return nil
}

// apply takes the block c as the host's state and fills res from it.
func (o *Optimizer) apply(c backend.Control, res *StepResult) {
	o.control.host = c
	o.step = int(c.Step)
	if s := o.cfg.LossScaler; s != nil {
		s.scale, s.good = c.Scale, int(c.Good)
	}
	res.Pending = false
	res.Step, res.GradNorm, res.ClipCoef, res.LossScale = o.step, c.Norm, c.Clip, c.Used
	res.Skipped = c.Skip != 0
	res.Reason = ""
	if res.Skipped {
		res.Reason = fmt.Sprintf("%d gradient elements are not finite (or square past float32)", c.NonFinite)
		o.logSkip(res)
	}
}

// readLater queues the copy of the block that resolve reads (deferred
// steps), after the step's last phase before the gathers.
func (o *Optimizer) readLater() error {
	p, err := o.backend.(backend.AsyncReader).ReadLater(o.control.buf, backend.ControlBytes)
	if err != nil {
		return o.fail(fmt.Errorf("optimizer: reading the step control block back: %w", err))
	}
	o.control.pend, o.control.waited = p, len(o.pipe.deviceWaited)
	return nil
}

// resolve reads the block of the last deferred step, waiting for it only
// when it has not landed yet, and makes the host state exact again (step
// count, loss scaler, the last result). The works the device waited for
// before the block are complete then: the host releases them.
func (o *Optimizer) resolve() error {
	p := o.control.pend
	if p == nil {
		return nil
	}
	o.control.pend = nil
	raw, err := p.Bytes()
	if err != nil {
		return o.fail(fmt.Errorf("optimizer: reading the step control block back: %w", err))
	}
	c, err := backend.DecodeControl(raw)
	if err != nil {
		return o.fail(err)
	}
	o.apply(c, &o.control.last)
	if err := o.pipe.releaseDeviceWaited(context.Background(), o.control.waited); err != nil {
		return o.fail(fmt.Errorf("optimizer: collective: %w", err))
	}
	return nil
}

// LastResult returns the result of the last step. After a StepAsync whose
// result came back Pending, it reads the step control block (waiting for
// the device only when the step has not got that far) and returns the
// complete result: whether the step was skipped, the gradient norm, the
// clip coefficient and the loss scale. The next step, StepCount,
// LossScale and Scalars read it too.
func (o *Optimizer) LastResult() (StepResult, error) {
	if err := o.usable(); err != nil {
		return StepResult{}, err
	}
	if err := o.resolve(); err != nil {
		return StepResult{}, err
	}
	return o.control.last, nil
}

// settled resolves the pending block for the accessors of host state that
// return no error: a failure breaks the optimizer (usable reports it).
func (o *Optimizer) settled() {
	if o.control.pend != nil && o.broken == nil {
		_ = o.resolve()
	}
}
