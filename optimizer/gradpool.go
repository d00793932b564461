package optimizer

import (
	"context"
	"fmt"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer/backend"
)

// This file holds sharded gradients (Config.ShardedGradients, ZeRO-2): a
// pool of bucket-sized gradient buffers lent to the buckets the backward
// pass is writing, each reduce-scattered into the bucket's gradient shard
// as soon as it is complete, then reused.

// gradPool is the state of sharded gradients. Its fields are guarded by
// pipeline.mu, as the readiness counts are.
type gradPool struct {
	bufs    []buffer.Buffer // Config.GradBuffers buffers of the largest bucket's gradient
	free    []int           // indices of the buffers lent to no bucket
	held    []int           // per bucket: the buffer it writes, or -1
	gen     []uint64        // per bucket: lease count, to tell stale views
	started []int           // per bucket: micro-batches whose reduce-scatter started this step
	fifo    []poolFlight    // reduce-scatters started and not yet reclaimed, oldest first
}

// poolFlight is one bucket's reduce-scatter of one micro-batch.
type poolFlight struct {
	bucket, buf int
	first       bool // the step's first micro-batch: reduced straight into the shard
	w           collective.Work
}

// allocPool makes the pool of sharded gradients (nothing without them).
func (o *Optimizer) allocPool() error {
	if !o.cfg.ShardedGradients {
		return nil
	}
	p := &gradPool{held: make([]int, len(o.buckets)), gen: make([]uint64, len(o.buckets)), started: make([]int, len(o.buckets))}
	o.pool = p
	for b := range p.held {
		p.held[b] = -1
	}
	n := int(poolBufferBytes(o.layout, &o.cfg))
	for i := range o.cfg.GradBuffers {
		buf, err := o.backend.Alloc(n)
		if err != nil {
			return err
		}
		p.bufs = append(p.bufs, buf)
		p.free = append(p.free, i)
	}
	return nil
}

// checkPoolBackend refuses sharded gradients with accumulation on a backend
// that cannot add gradient shards.
func checkPoolBackend(cfg *Config, be backend.Backend) error {
	if _, ok := be.(backend.GradAccumulator); cfg.ShardedGradients && cfg.MicroBatches > 1 && !ok {
		return fmt.Errorf("optimizer: sharded gradients with %d micro-batches need a backend that accumulates gradient shards (backend.GradAccumulator); %s does not: %w", cfg.MicroBatches, be.Name(), ErrConfig)
	}
	return nil
}

// poolView returns the view of parameter i in the buffer its bucket holds,
// lending the bucket a buffer first when it has none (zeroed). Called with
// pipe.mu held.
func (o *Optimizer) poolView(i int) (GradView, error) {
	b := o.layout.Places[i].Bucket
	if err := o.poolWritable(i, b); err != nil {
		return GradView{}, err
	}
	if err := o.lend(b); err != nil {
		return GradView{}, err
	}
	p, pl := o.pool, o.layout.Places[i]
	sz := o.cfg.GradType.Size()
	v := GradView{Name: o.params[i].Name, Shape: o.params[i].Shape, DType: o.cfg.GradType, Data: p.bufs[p.held[b]].Slice(sz*pl.Offset, sz*(pl.Offset+pl.Len))}
	v.lease = &viewLease{pipe: o.pipe, pool: p, bucket: b, gen: p.gen[b]}
	return v, nil
}

// poolWritable refuses a write of parameter i (bucket b) once the parameter
// was declared ready for the micro-batch its bucket's buffer holds.
func (o *Optimizer) poolWritable(i, b int) error {
	if o.pipe.ready[i] > o.pool.started[b] {
		return fmt.Errorf("optimizer: gradient of %q written after its GradReady, before its bucket's reduce-scatter started (the bucket waits for the buckets before it in the backward order, or for other parameters): %w", o.params[i].Name, ErrGradReady)
	}
	return nil
}

// lend gives bucket b a zeroed buffer of the pool when it has none: a free
// one, else the oldest whose reduce-scatter is in flight, once complete.
// With every buffer lent to a bucket still being written it returns
// ErrGradPool.
func (o *Optimizer) lend(b int) error {
	p := o.pool
	if p.held[b] >= 0 {
		return nil
	}
	if len(p.free) == 0 && len(p.fifo) > 0 {
		if err := o.reclaim(context.Background()); err != nil {
			return err
		}
	}
	if len(p.free) == 0 {
		return fmt.Errorf("optimizer: bucket %d needs a gradient buffer but all %d are lent to buckets not yet declared ready (call GradReady as each gradient completes, or raise Config.GradBuffers): %w", b, len(p.bufs), ErrGradPool)
	}
	k := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	if err := o.backend.Zero(p.bufs[k], 0, p.bufs[k].Len()); err != nil {
		return o.fail(err)
	}
	p.held[b] = k
	p.gen[b]++
	return nil
}

// reclaim waits for the oldest reduce-scatter in flight, adds its shard to
// the bucket's gradient shard (after the first micro-batch), and frees its
// buffer.
func (o *Optimizer) reclaim(ctx context.Context) error {
	p := o.pool
	f := p.fifo[0]
	p.fifo = p.fifo[1:]
	if err := o.pipe.after(ctx, f.w); err != nil {
		o.keepInFlight()
		return o.fail(fmt.Errorf("optimizer: gradient reduce-scatter of bucket %d: %w", f.bucket, err))
	}
	if !f.first {
		bk := o.buckets[f.bucket]
		gsz := o.cfg.GradType.Size()
		src := p.bufs[f.buf].Slice(gsz*bk.lo, gsz*bk.hi)
		if err := o.backend.(backend.GradAccumulator).AccumulateGrad(bk.acc, src, o.cfg.GradType, bk.b.ShardSize); err != nil {
			return o.fail(fmt.Errorf("optimizer: gradient accumulation of bucket %d: %w", f.bucket, err))
		}
	}
	p.free = append(p.free, f.buf)
	return nil
}

// poolReady is GradReady of parameter i with sharded gradients (pipe.mu
// held): a bucket's reduce-scatter starts for every micro-batch, in the
// order micro-batch by micro-batch, each in the backward bucket order.
func (o *Optimizer) poolReady(i int) error {
	pipe, p := o.pipe, o.pool
	b := o.layout.Places[i].Bucket
	if err := o.poolWritable(i, b); err != nil {
		return err
	}
	if err := o.lend(b); err != nil { // a parameter never written: a zero gradient
		return err
	}
	pipe.any = true
	pipe.ready[i]++
	pipe.missing[b]--
	nb := len(o.buckets)
	for pipe.next < o.cfg.MicroBatches*nb {
		b, m := o.backward(pipe.next%nb), pipe.next/nb
		if pipe.missing[b] != 0 || p.started[b] != m {
			break
		}
		o.startPooled(b, m == 0)
		pipe.missing[b] = len(o.buckets[b].b.Params)
		pipe.next++
	}
	return nil
}

// startPooled starts bucket b's reduce-scatter from its buffer: into the
// gradient shard for the first micro-batch, else in place for reclaim to
// add. The bucket's views end.
func (o *Optimizer) startPooled(b int, first bool) {
	p, bk := o.pool, o.buckets[b]
	gsz := o.cfg.GradType.Size()
	k := p.held[b]
	src := p.bufs[k].Slice(0, gsz*bk.b.Size)
	dst := src.Slice(gsz*bk.lo, gsz*bk.hi)
	if first {
		dst = bk.acc
	}
	w := o.comm.Start(collective.Op{Kind: collective.OpReduceScatter, Src: src, Dst: dst, DType: o.cfg.GradType, Reduce: collective.Avg, Tag: GradTag(b)})
	p.fifo = append(p.fifo, poolFlight{bucket: b, buf: k, first: first, w: w})
	p.held[b] = -1
	p.gen[b]++
	p.started[b]++
}

// reducePooled is phase 1 with sharded gradients: every bucket's
// reduce-scatter of every micro-batch must have started (GradReady); the
// ones in flight are waited for and accumulated, oldest first.
func (o *Optimizer) reducePooled(ctx context.Context, t *Timings) error {
	pipe := o.pipe
	defer o.resetPipeline(pipe)
	if pipe.next < o.cfg.MicroBatches*len(o.buckets) {
		for i, n := range pipe.ready {
			if n < o.cfg.MicroBatches {
				err := fmt.Errorf("optimizer: Step with sharded gradients and the gradient of %q declared ready %d of %d times (GradReady): %w", o.params[i].Name, n, o.cfg.MicroBatches, ErrGradReady)
				if pipe.next == 0 {
					return err // nothing started: the ranks still agree
				}
				o.keepInFlight()
				return o.fail(err)
			}
		}
	}
	t0 := time.Now()
	for len(o.pool.fifo) > 0 {
		if err := o.reclaim(ctx); err != nil {
			return err
		}
	}
	t.ReduceScatter = since(&t0)
	return nil
}

// resetPool ends every lease for the next step (pipe.mu held).
func (p *gradPool) reset() {
	for b, k := range p.held {
		if k >= 0 {
			p.free = append(p.free, k)
			p.held[b] = -1
		}
		p.gen[b]++
		p.started[b] = 0
	}
	for _, f := range p.fifo { // after a failure: the works are kept for Close
		p.free = append(p.free, f.buf)
	}
	p.fifo = p.fifo[:0]
}

// works returns the reduce-scatters in flight.
func (p *gradPool) works() []collective.Work {
	var ws []collective.Work
	for _, f := range p.fifo {
		ws = append(ws, f.w)
	}
	return ws
}

// viewLease ties a gradient view to its bucket's lease of a pool buffer.
type viewLease struct {
	pipe   *pipeline
	pool   *gradPool
	bucket int
	gen    uint64
}

// Valid returns nil while the view may be written: always without sharded
// gradients; with them, until its bucket is declared ready (the last
// GradReady of its parameters for the micro-batch) or Step, after which the
// buffer behind it belongs to another bucket and Valid returns ErrGradPool.
func (v GradView) Valid() error {
	l := v.lease
	if l == nil {
		return nil
	}
	l.pipe.mu.Lock()
	defer l.pipe.mu.Unlock()
	if l.pool.gen[l.bucket] != l.gen {
		return fmt.Errorf("optimizer: gradient view of %q used after its bucket was declared ready: %w", v.Name, ErrGradPool)
	}
	return nil
}

// zeroPool is ZeroGrad with sharded gradients: the buffers lent to buckets
// being written are zeroed.
func (o *Optimizer) zeroPool() error {
	o.pipe.mu.Lock()
	defer o.pipe.mu.Unlock()
	p := o.pool
	for _, k := range p.held {
		if k < 0 {
			continue
		}
		if err := o.backend.Zero(p.bufs[k], 0, p.bufs[k].Len()); err != nil {
			return o.fail(err)
		}
	}
	return nil
}
