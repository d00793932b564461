package optimizer

import (
	"context"
	"fmt"
	"time"

	"github.com/distopt/distopt/collective"
)

// This file holds the parameter side of the overlapped pipeline: StepAsync,
// which returns with one all-gather per bucket in flight, and the waits the
// forward pass makes before it reads a parameter.

// StepAsync is Step returning with the parameters' all-gathers in flight:
// one per bucket, started in bucket (forward) order, so that the next
// forward pass runs while they travel. Before the forward pass reads a
// parameter it calls WaitParam (or WaitGathers for all): until then Param,
// Tensor and Weights of that parameter return ErrNotGathered. The next
// Step or StepAsync orders itself after the gathers not waited for. The
// bits are those of Step: the same stages run in the same order, only the
// waits move.
//
// A skipped step starts no gather: the parameters stay as they were. On a
// backend that keeps the step's decision on the device (AsyncReader), the
// result comes back Pending (see LastResult) and a skipped step's gathers
// run, carrying the unchanged parameters.
func (o *Optimizer) StepAsync(ctx context.Context) (StepResult, error) {
	return o.stepWith(ctx, true)
}

// WaitParam waits for the all-gather of the named parameter's bucket, if
// one is in flight (StepAsync), and makes the parameter readable. On the
// CPU backend it blocks until the gather is done, or ctx ends. On a backend
// that orders its work on the device (DeviceOrderer: optimizer/gpu), the
// backend's stream waits for the gather by an event and the host does not:
// read the parameter on that stream. A failed gather breaks the optimizer
// (ErrBroken from then on).
func (o *Optimizer) WaitParam(ctx context.Context, name string) error {
	if err := o.usable(); err != nil {
		return err
	}
	i, ok := o.pipe.index[name]
	if !ok {
		return fmt.Errorf("optimizer: WaitParam(%q): %w", name, ErrUnknownParam)
	}
	return o.waitGather(ctx, o.layout.Places[i].Bucket)
}

// WaitGathers waits for every all-gather in flight, as WaitParam does for
// one (the newest first: on a device one wait can cover all).
func (o *Optimizer) WaitGathers(ctx context.Context) error {
	if err := o.usable(); err != nil {
		return err
	}
	return o.waitAllGathers(ctx)
}

// waitAllGathers orders the backend after every gather in flight, the
// newest first (DeviceOrderer).
func (o *Optimizer) waitAllGathers(ctx context.Context) error {
	for b := len(o.buckets) - 1; b >= 0; b-- {
		if err := o.waitGather(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// waitGather orders the backend after bucket b's gather, if in flight.
func (o *Optimizer) waitGather(ctx context.Context, b int) error {
	if err := o.pipe.finishParamSync(ctx, b); err != nil {
		return o.fail(fmt.Errorf("optimizer: parameter all-gather of bucket %d: %w", b, err))
	}
	return nil
}

// gathered returns an error wrapping ErrNotGathered when bucket b's gather
// has not been waited for.
func (o *Optimizer) gathered(name string, b int) error {
	if o.pipe.paramSyncing(b) {
		return fmt.Errorf("optimizer: %q: its bucket's all-gather is in flight; call WaitParam first: %w", name, ErrNotGathered)
	}
	return nil
}

// closeWait bounds how long Close waits for the collectives in flight.
const closeWait = 10 * time.Second

// drain waits for every collective the pipeline has in flight, for at most
// closeWait (past it the communicator aborts them, freeing the buffers).
func (o *Optimizer) drain() error {
	if o.pipe == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	var pooled []collective.Work
	if o.pool != nil {
		pooled = o.pool.works()
		o.pool.fifo = o.pool.fifo[:0]
	}
	if err := o.pipe.drain(ctx, pooled); err != nil {
		return fmt.Errorf("optimizer: collectives in flight at Close: %w", err)
	}
	return o.backend.Sync()
}
