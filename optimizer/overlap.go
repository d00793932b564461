package optimizer

import (
	"context"
	"fmt"
	"time"

	"github.com/distopt/distopt/collective"
)

// This file holds the gradient side of the overlapped pipeline: GradReady
// and the reduce-scatter of each bucket as soon as its gradients are
// complete, started in a fixed order on every rank.

// newPipeline returns the bucket pipeline of o's layout, every bucket idle.
func (o *Optimizer) newPipeline() *pipeline {
	names := make([]string, len(o.params))
	for i, p := range o.params {
		names[i] = p.Name
	}
	p := newPipeline(o.comm, o.backend, names, len(o.buckets))
	o.resetPipeline(p)
	return p
}

// resetPipeline makes every parameter not ready, and ends every lease of
// the gradient pool, for the next step.
func (o *Optimizer) resetPipeline(p *pipeline) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sizes := make([]int, len(o.buckets))
	for b, bk := range o.buckets {
		sizes[b] = len(bk.b.Params)
	}
	p.reset(sizes)
	if o.pool != nil {
		o.pool.reset()
	}
}

// backward returns the bucket that starts k-th in the backward order: the
// reverse of the layout's, since parameters are listed in forward order.
func (o *Optimizer) backward(k int) int { return len(o.buckets) - 1 - k }

// GradReady tells the optimizer that the named parameter's gradient is
// complete in its view for this micro-batch. Call it from the backward
// pass, once per parameter and micro-batch, after the gradient's last
// write. On a GPU, call it once the kernels that write it are queued on
// the backend's stream.
//
// When every parameter of a bucket is ready, the bucket's reduce-scatter
// starts at once, without blocking. Buckets start in the reverse order of
// the parameter list, the same on every rank. From then until Step the
// bucket's gradients must not be written.
//
// GradReady and SetGrad may run concurrently with each other, but not with
// the other methods. See docs/DESIGN.md, "Note: bucket pipeline".
//
// Errors: ErrUnknownParam; ErrGradReady when the parameter was already
// declared ready MicroBatches times this step; ErrGradPool when sharded
// gradients have no free buffer for a parameter never written.
func (o *Optimizer) GradReady(name string) error {
	if err := o.usable(); err != nil {
		return err
	}
	pipe := o.pipe
	i, ok := pipe.index[name]
	if !ok {
		return fmt.Errorf("optimizer: GradReady(%q): %w", name, ErrUnknownParam)
	}
	if err := o.needGrads("GradReady", name); err != nil {
		return err
	}
	o.markGrad()
	pipe.mu.Lock()
	defer pipe.mu.Unlock()
	if pipe.ready[i] == o.cfg.MicroBatches {
		return fmt.Errorf("optimizer: GradReady(%q) called more than %d times (Config.MicroBatches) in one step: %w", name, o.cfg.MicroBatches, ErrGradReady)
	}
	if o.pool != nil {
		return o.poolReady(i)
	}
	pipe.any = true
	if pipe.ready[i]++; pipe.ready[i] < o.cfg.MicroBatches {
		return nil
	}
	pipe.missing[o.layout.Places[i].Bucket]--
	for pipe.next < len(o.buckets) && pipe.missing[o.backward(pipe.next)] == 0 {
		b := o.backward(pipe.next)
		pipe.startGradSync(b, o.reduceOp(o.buckets[b]))
		pipe.next++
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
	if o.pipe.gradSyncing(b) {
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
	pipe := o.pipe
	defer o.resetPipeline(pipe)
	if pipe.next < len(o.buckets) {
		for i, n := range pipe.ready {
			if n < o.cfg.MicroBatches {
				o.keepInFlight()
				return o.fail(fmt.Errorf("optimizer: Step with the gradient of %q declared ready %d of %d times (GradReady): %w", o.params[i].Name, n, o.cfg.MicroBatches, ErrGradReady))
			}
		}
	}
	t0 := time.Now()
	newest := make([]int, len(o.buckets)) // the backward order, newest first
	for k := range newest {
		newest[k] = o.backward(len(o.buckets) - 1 - k)
	}
	if b, err := pipe.finishGradSync(ctx, newest); err != nil {
		o.keepInFlight()
		return o.fail(fmt.Errorf("optimizer: gradient reduce-scatter of bucket %d: %w", b, err))
	}
	t.ReduceScatter = since(&t0)
	return nil
}

// keepInFlight hands the collectives still in flight to those Close
// waits for, before a failed step forgets them.
func (o *Optimizer) keepInFlight() {
	var pooled []collective.Work
	if o.pool != nil {
		pooled = o.pool.works()
		o.pool.fifo = o.pool.fifo[:0]
	}
	o.pipe.keepInFlight(pooled)
}

// releaseDeviceWaited waits on the host for the works only the device
// waited for, once the backend has synchronised with the host.
func (o *Optimizer) releaseDeviceWaited(ctx context.Context) error {
	if err := o.pipe.releaseDeviceWaited(ctx, len(o.pipe.deviceWaited)); err != nil {
		return o.fail(fmt.Errorf("optimizer: collective: %w", err))
	}
	return nil
}
