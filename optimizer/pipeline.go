package optimizer

import (
	"context"
	"errors"
	"sync"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer/backend"
)

// pipeline is the bucket pipeline: each bucket's gradient reduce-scatter
// and parameter all-gather, started and finished as pairs. Every rank
// starts the same collectives in the same order, whatever the order of
// its GradReady calls. See docs/DESIGN.md, "Note: bucket pipeline".
type pipeline struct {
	comm    collective.Communicator
	orderer backend.DeviceOrderer // nil: the host waits for every collective
	index   map[string]int        // parameter index by name, read-only

	// mu guards the readiness counts and gradSync against concurrent
	// GradReady and SetGrad calls from backward hooks.
	mu      sync.Mutex
	ready   []int // per parameter: GradReady calls this step
	missing []int // per bucket: parameters not yet ready for the last time
	next    int   // how many buckets of the backward order have started
	any     bool  // GradReady was called this step

	gradSync  []collective.Work // per bucket: its reduce-scatter in flight, or nil
	paramSync []collective.Work // per bucket: its all-gather not yet waited for, or nil
	// deviceWaited holds works that only the device waited for. The host
	// waits for them once the device has passed them (releaseDeviceWaited).
	deviceWaited []collective.Work
}

// newPipeline returns the pipeline of nBuckets buckets over the named
// parameters, every bucket idle once reset. be orders its work after the
// collectives when it is a DeviceOrderer.
func newPipeline(comm collective.Communicator, be backend.Backend, names []string, nBuckets int) *pipeline {
	p := &pipeline{
		comm:      comm,
		index:     make(map[string]int, len(names)),
		ready:     make([]int, len(names)),
		missing:   make([]int, nBuckets),
		gradSync:  make([]collective.Work, nBuckets),
		paramSync: make([]collective.Work, nBuckets),
	}
	p.orderer, _ = be.(backend.DeviceOrderer)
	for i, name := range names {
		p.index[name] = i
	}
	return p
}

// reset makes every parameter not ready for the next step; sizes[b] is
// the number of parameters of bucket b (p.mu held).
func (p *pipeline) reset(sizes []int) {
	clear(p.ready)
	copy(p.missing, sizes)
	clear(p.gradSync)
	p.next, p.any = 0, false
}

// startGradSync starts bucket b's gradient reduce-scatter (p.mu held).
func (p *pipeline) startGradSync(b int, op collective.Op) {
	p.gradSync[b] = p.comm.Start(op)
}

// gradSyncing reports whether bucket b's reduce-scatter has started this
// step and is not finished.
func (p *pipeline) gradSyncing(b int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gradSync[b] != nil
}

// finishGradSync orders the backend after every bucket's reduce-scatter.
// order lists the buckets newest first, so that a DeviceOrderer may need
// one wait. On an error it returns the bucket that failed.
func (p *pipeline) finishGradSync(ctx context.Context, order []int) (int, error) {
	for _, b := range order {
		err := p.after(ctx, p.gradSync[b])
		p.gradSync[b] = nil
		if err != nil {
			return b, err
		}
	}
	return -1, nil
}

// startParamSync starts the all-gathers of every bucket, groups[b] being
// bucket b's, with one call.
func (p *pipeline) startParamSync(groups [][]collective.Op) {
	copy(p.paramSync, collective.StartEach(p.comm, groups...))
}

// startBucketParamSync starts bucket b's all-gathers.
func (p *pipeline) startBucketParamSync(b int, ops []collective.Op) {
	p.paramSync[b] = p.comm.Start(ops...)
}

// paramSyncing reports whether bucket b's all-gather has not been waited
// for.
func (p *pipeline) paramSyncing(b int) bool { return p != nil && p.paramSync[b] != nil }

// finishParamSync orders the backend after bucket b's all-gather, if one
// is in flight.
func (p *pipeline) finishParamSync(ctx context.Context, b int) error {
	w := p.paramSync[b]
	if w == nil {
		return nil
	}
	p.paramSync[b] = nil
	return p.after(ctx, w)
}

// waitParamSync waits on the host for every bucket's all-gather, in bucket
// order, and reports the bucket that failed.
func (p *pipeline) waitParamSync(ctx context.Context) (int, error) {
	for b, w := range p.paramSync {
		p.paramSync[b] = nil
		if err := w.Wait(ctx); err != nil {
			return b, err
		}
	}
	return -1, nil
}

// after orders the backend's later work after w. A DeviceOrderer that
// knows w waits on the device, and the host waits later
// (releaseDeviceWaited); otherwise the host waits now.
func (p *pipeline) after(ctx context.Context, w collective.Work) error {
	if p.orderer != nil {
		queued, err := p.orderer.After(w)
		if err != nil {
			return err
		}
		if queued {
			p.deviceWaited = append(p.deviceWaited, w)
			return nil
		}
	}
	return w.Wait(ctx)
}

// releaseDeviceWaited waits on the host for the first n works that only
// the device waited for, once the device has passed them: Wait then
// returns at once and releases them.
func (p *pipeline) releaseDeviceWaited(ctx context.Context, n int) error {
	done := p.deviceWaited[:n:n]
	p.deviceWaited = append([]collective.Work(nil), p.deviceWaited[n:]...)
	var err error
	for i := len(done) - 1; i >= 0; i-- { // newest first: one look can tell of all (collective/nccl)
		err = errors.Join(err, done[i].Wait(ctx))
	}
	return err
}

// keepInFlight moves the reduce-scatters still in flight, and the pool's
// works, to those Close waits for, before a failed step forgets them.
func (p *pipeline) keepInFlight(pooled []collective.Work) {
	for _, w := range p.gradSync {
		if w != nil {
			p.deviceWaited = append(p.deviceWaited, w)
		}
	}
	p.deviceWaited = append(p.deviceWaited, pooled...)
}

// drain waits for every collective in flight, pooled ones included.
func (p *pipeline) drain(ctx context.Context, pooled []collective.Work) error {
	var err error
	for _, ws := range [][]collective.Work{p.gradSync, pooled, p.paramSync, p.deviceWaited} {
		for i, w := range ws {
			if w != nil {
				err = errors.Join(err, w.Wait(ctx))
				ws[i] = nil
			}
		}
	}
	p.deviceWaited = nil
	return err
}
