package optimizer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer/backend"
)

// This file holds the gradient side of the overlapped pipeline: GradReady
// and the reduce-scatter of each bucket as soon as its gradients are
// complete, started in a fixed order on every rank.

var (
	// ErrGradReady marks a misuse of GradReady: a parameter declared ready
	// more often than Config.MicroBatches in one step, a Step with some
	// gradients declared and others not, or a gradient written while its
	// bucket's reduce-scatter is in flight.
	ErrGradReady = errors.New("gradient readiness out of sequence")
	// ErrNotGathered is returned by Param, Tensor and Weights for a
	// parameter whose bucket's all-gather, started by StepAsync, has not
	// been waited for (WaitParam, WaitGathers).
	ErrNotGathered = errors.New("parameter not gathered yet")
)

// overlap is the state of the overlapped pipeline between two steps.
type overlap struct {
	index map[string]int // parameter index by name, read-only

	// mu guards ready, missing, next, any and rs against concurrent
	// GradReady and SetGrad calls (backward hooks on several goroutines).
	mu      sync.Mutex
	ready   []int             // per parameter: GradReady calls this step
	missing []int             // per bucket: parameters not yet ready for the last time
	next    int               // how many buckets of the backward order have started
	any     bool              // GradReady was called this step
	rs      []collective.Work // per bucket: its reduce-scatter in flight, or nil
	gathers []collective.Work // per bucket: its all-gather not yet waited for, or nil
	// settle holds works only the device waited for (DeviceOrderer); the
	// host waits for them once the device has passed them.
	settle []collective.Work
}

// newOverlap returns the pipeline state of o's layout, every bucket idle.
func (o *Optimizer) newOverlap() *overlap {
	ov := &overlap{
		index:   make(map[string]int, len(o.params)),
		ready:   make([]int, len(o.params)),
		missing: make([]int, len(o.buckets)),
		rs:      make([]collective.Work, len(o.buckets)),
		gathers: make([]collective.Work, len(o.buckets)),
	}
	for i, p := range o.params {
		ov.index[p.Name] = i
	}
	ov.reset(o)
	return ov
}

// reset makes every parameter not ready, for the next step.
func (ov *overlap) reset(o *Optimizer) {
	ov.mu.Lock()
	defer ov.mu.Unlock()
	clear(ov.ready)
	for b, bk := range o.buckets {
		ov.missing[b] = len(bk.b.Params)
		ov.rs[b] = nil
	}
	ov.next, ov.any = 0, false
	if o.pool != nil {
		o.pool.reset()
	}
}

// backward returns the bucket that starts k-th in the backward order: the
// reverse of the layout's, since parameters are listed in forward order.
func (o *Optimizer) backward(k int) int { return len(o.buckets) - 1 - k }

// GradReady tells the optimizer that the gradient of the named parameter is
// complete in its view (Grad) for this micro-batch. The training framework
// calls it from its backward pass, once per parameter and micro-batch, after
// the gradient's last write: on the CPU, once the write is done; on a GPU,
// once the kernels that write it are queued on the backend's stream (with
// optimizer/gpu's Setup the communicator orders its work after them by an
// event, so the host never waits).
//
// At the last of Config.MicroBatches calls for every parameter of a bucket,
// the bucket's reduce-scatter starts at once, asynchronously. Buckets start
// in the backward order, the reverse of the parameter list (list parameters
// in the order the forward pass uses them): a bucket complete before a
// bucket that precedes it in that order waits for it, so that every rank
// starts the same collectives in the same order whatever the order of its
// GradReady calls. From its bucket's start until Step, a gradient must not
// be written (SetGrad and ZeroGrad refuse; writes through the views are the
// caller's responsibility).
//
// Unlike the other methods, GradReady and SetGrad may be called from
// several goroutines at once (backward hooks running in parallel), though
// not concurrently with the other methods.
//
// With Config.ShardedGradients a bucket's reduce-scatter starts at the last
// GradReady of its parameters in every micro-batch, from the pool buffer
// its gradients were written to, and the bucket's views end (see the
// package documentation).
//
// Errors: ErrUnknownParam; ErrGradReady when the parameter was already
// declared ready MicroBatches times this step (with sharded gradients, also
// when its bucket's reduce-scatter of the previous micro-batch has not
// started); ErrGradPool when a parameter never written needs a pool buffer
// and none is free. GradReady does not block, except with sharded
// gradients to wait for a pool buffer's reduce-scatter to complete.
func (o *Optimizer) GradReady(name string) error {
	if err := o.usable(); err != nil {
		return err
	}
	ov := o.ov
	i, ok := ov.index[name]
	if !ok {
		return fmt.Errorf("optimizer: GradReady(%q): %w", name, ErrUnknownParam)
	}
	o.markGrad()
	ov.mu.Lock()
	defer ov.mu.Unlock()
	if ov.ready[i] == o.cfg.MicroBatches {
		return fmt.Errorf("optimizer: GradReady(%q) called more than %d times (Config.MicroBatches) in one step: %w", name, o.cfg.MicroBatches, ErrGradReady)
	}
	if o.pool != nil {
		return o.poolReady(i)
	}
	ov.any = true
	if ov.ready[i]++; ov.ready[i] < o.cfg.MicroBatches {
		return nil
	}
	ov.missing[o.layout.Places[i].Bucket]--
	for ov.next < len(o.buckets) && ov.missing[o.backward(ov.next)] == 0 {
		b := o.backward(ov.next)
		bk := o.buckets[b]
		ov.rs[b] = o.comm.Start(o.reduceOp(bk))
		ov.next++
	}
	return nil
}

// reduceOp is the reduce-scatter (average, in place) of bucket bk.
func (o *Optimizer) reduceOp(bk *bucket) collective.Op {
	return collective.Op{Kind: collective.OpReduceScatter, Src: bk.grad, Dst: o.gradShard(bk), DType: o.cfg.GradType, Reduce: collective.Avg, Tag: GradTag(bk.idx)}
}

// GradTag is the collective.Op Tag of bucket b's gradient reduce-scatter,
// the same with or without sharded gradients and for every micro-batch:
// b + 1. A communicator that keeps state per reduction (collective/fp8grad's
// error feedback) keys it by the tag, since with sharded gradients one
// buffer of the pool serves several buckets.
func GradTag(b int) uint64 { return uint64(b) + 1 }

// inFlight returns an error wrapping ErrGradReady when bucket b's
// reduce-scatter has started this step (its gradients must not change).
func (o *Optimizer) inFlight(b int, what string) error {
	o.ov.mu.Lock()
	defer o.ov.mu.Unlock()
	if o.ov.rs[b] != nil {
		return fmt.Errorf("optimizer: %s while the reduce-scatter of its bucket is in flight (after GradReady, before Step): %w", what, ErrGradReady)
	}
	return nil
}

// reduceReady is phase 1 of a step whose gradients were declared ready:
// every bucket's reduce-scatter has started; the backend is ordered after
// each (on the device when it can, else the host waits). A parameter not
// declared ready is an error wrapping ErrGradReady, and breaks the
// optimizer: the other buckets' collectives are in flight and the ranks no
// longer start the same ones.
func (o *Optimizer) reduceReady(ctx context.Context, t *Timings) error {
	ov := o.ov
	defer ov.reset(o)
	if ov.next < len(o.buckets) {
		for i, n := range ov.ready {
			if n < o.cfg.MicroBatches {
				o.keepInFlight()
				return o.fail(fmt.Errorf("optimizer: Step with the gradient of %q declared ready %d of %d times (GradReady): %w", o.params[i].Name, n, o.cfg.MicroBatches, ErrGradReady))
			}
		}
	}
	t0 := time.Now()
	for k := len(o.buckets) - 1; k >= 0; k-- { // newest first: a DeviceOrderer may need one wait
		b := o.backward(k)
		err := o.after(ctx, ov.rs[b])
		ov.rs[b] = nil
		if err != nil {
			o.keepInFlight()
			return o.fail(fmt.Errorf("optimizer: gradient reduce-scatter of bucket %d: %w", b, err))
		}
	}
	t.ReduceScatter = since(&t0)
	return nil
}

// keepInFlight moves the reduce-scatters still in flight to the works
// Close waits for, before a failed step forgets them.
func (o *Optimizer) keepInFlight() {
	for _, w := range o.ov.rs {
		if w != nil {
			o.ov.settle = append(o.ov.settle, w)
		}
	}
	if o.pool != nil {
		o.ov.settle = append(o.ov.settle, o.pool.works()...)
		o.pool.fifo = o.pool.fifo[:0]
	}
}

// after orders the backend's later work after w: on the device when the
// backend is a DeviceOrderer that knows w (the host waits for w later, in
// settleWorks), else by waiting for w on the host.
func (o *Optimizer) after(ctx context.Context, w collective.Work) error {
	if d, ok := o.be.(backend.DeviceOrderer); ok {
		queued, err := d.After(w)
		if err != nil {
			return err
		}
		if queued {
			o.ov.settle = append(o.ov.settle, w)
			return nil
		}
	}
	return w.Wait(ctx)
}

// settleWorks waits on the host for the works only the device waited for,
// once the backend has synchronised with the host (they are complete: Wait
// returns at once and releases them).
func (o *Optimizer) settleWorks(ctx context.Context) error {
	var err error
	for i := len(o.ov.settle) - 1; i >= 0; i-- { // newest first: one look can tell of all (collective/nccl)
		err = errors.Join(err, o.ov.settle[i].Wait(ctx))
	}
	o.ov.settle = o.ov.settle[:0]
	if err != nil {
		return o.fail(fmt.Errorf("optimizer: collective: %w", err))
	}
	return nil
}
