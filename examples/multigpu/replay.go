package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
)

// recorder is the optimizer's communicator in -compute gemm: it passes
// every group through and, while recording, keeps a copy of the groups, so
// that the communication of one step can be run again alone (replay) to
// time the collectives without compute and without the optimizer's
// kernels. The works it returns are the communicator's own, so that a
// backend that orders itself after them on the device (DeviceOrderer)
// still recognises them.
type recorder struct {
	collective.Communicator

	mu        sync.Mutex
	recording bool
	groups    [][]collective.Op
}

// Ordinal is the GPU of the wrapped communicator (backend.OnDevice), -1
// for a host communicator.
func (r *recorder) Ordinal() int {
	if d, ok := r.Communicator.(backend.OnDevice); ok {
		return d.Ordinal()
	}
	return -1
}

// Start implements collective.Communicator.
func (r *recorder) Start(ops ...collective.Op) collective.Work {
	r.mu.Lock()
	if r.recording {
		r.groups = append(r.groups, append([]collective.Op(nil), ops...))
	}
	r.mu.Unlock()
	return r.Communicator.Start(ops...)
}

// record starts (on) or ends recording; starting forgets the last record.
func (r *recorder) record(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.groups = nil
	}
	r.recording = on
}

// recorded returns the groups recorded.
func (r *recorder) recorded() [][]collective.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.groups
}

// replay starts the recorded groups again, all of them, in order, on the
// wrapped communicator, then orders the backend after each (on the device
// when the backend is a DeviceOrderer, else the host waits): the
// collectives run back to back, as nothing but communication would. The
// works the device alone waited for are returned: wait for them on the
// host once the backend has synchronised (settle).
//
// The groups act on the optimizer's own buffers, in place, as the step
// does. Between two steps this leaves the state unchanged: the all-gathers
// write every rank's shard over itself, the amax all-reduce (maximum) is
// idempotent, the statistics all-reduce's buffer is cleared by the next
// step before use, and the reduce-scatters change only gradients, which
// the next iteration writes again in full.
func (r *recorder) replay(ctx context.Context, be backend.Backend) ([]collective.Work, error) {
	groups := r.recorded()
	works := make([]collective.Work, len(groups))
	for i, g := range groups {
		works[i] = r.Communicator.Start(g...)
	}
	var pending []collective.Work
	d, device := be.(backend.DeviceOrderer)
	var errs []error
	for i := len(works) - 1; i >= 0; i-- { // newest first (backend.DeviceOrderer)
		w := works[i]
		if device {
			queued, err := d.After(w)
			if err != nil {
				errs = append(errs, fmt.Errorf("replay of group %d: %w", i, err))
			}
			if queued {
				pending = append(pending, w)
				continue
			}
		}
		if err := w.Wait(ctx); err != nil {
			errs = append(errs, fmt.Errorf("replay of group %d (%s): %w", i, groups[i][0].Kind, err))
		}
	}
	return pending, errors.Join(errs...)
}

// settle waits on the host for works the device already waited for.
func settle(ctx context.Context, ws []collective.Work) error {
	var errs []error
	for _, w := range ws {
		errs = append(errs, w.Wait(ctx))
	}
	return errors.Join(errs...)
}
