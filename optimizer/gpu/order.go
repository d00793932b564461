package gpu

import (
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	pcuda "github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// streamWaiter is collective work that a stream can wait for on the device
// (collective/nccl's Work). It names the public stream, as nccl.Work does:
// the assertions below fail to compile if the two drift apart, instead of
// After silently falling back to host waits.
type streamWaiter interface {
	StreamWait(s *pcuda.Stream) error
}

var (
	_ streamWaiter = (*nccl.Work)(nil)
	_ precedent    = (*nccl.Work)(nil)
)

// precedent is a streamWaiter that knows whether a stream that waited for
// another work has waited for it too (collective/nccl's Work.Precedes:
// the groups of one communicator complete in order).
type precedent interface {
	Precedes(o collective.Work) bool
}

// After implements backend.DeviceOrderer: for the work of an NCCL
// communicator (collective/nccl) it makes the backend's stream wait for
// the group's completion event, and the host waits only until the group
// has been handed to NCCL, not for the transfer. Work that precedes the
// last work the stream waited for (outside a graph capture) needs no wait
// of its own: called newest first, as the optimizer does for the
// reduce-scatters of a step, After makes one wait for all of them. Other
// work (collective/single's, already complete) gives false.
func (b *Backend) After(w collective.Work) (bool, error) {
	sw, ok := w.(streamWaiter)
	if !ok {
		return false, nil
	}
	if b.s.CaptureBegun() { // a wait inside the graph: not one of the stream's own
		return true, sw.StreamWait(b.Stream())
	}
	b.orderMu.Lock()
	defer b.orderMu.Unlock()
	if p, ok := w.(precedent); ok && b.waited != nil && p.Precedes(b.waited) {
		b.skippedWaits++
		return true, nil
	}
	if err := sw.StreamWait(b.Stream()); err != nil {
		return true, err
	}
	b.waited = w
	return true, nil
}

var _ backend.DeviceOrderer = (*Backend)(nil)

// ScalesFromAmax implements backend.DeviceScaler: one launch on the
// compute stream (kernels.Set.ScalesFromAmax).
func (b *Backend) ScalesFromAmax(scale, scaleInv, amax, ctl buffer.Buffer, n int, r fp8.Recipe) error {
	return b.ks.ScalesFromAmax(b.s, b.ptr(scale), b.ptr(scaleInv), b.ptr(amax), b.ptr(ctl), n, r.Format, r.Margin, r.PowerOf2)
}

var _ backend.DeviceScaler = (*Backend)(nil)

// DelayedScales implements backend.DelayedScaler: one launch on the
// compute stream (kernels.Set.DelayedScales).
func (b *Backend) DelayedScales(scale, scaleInv, cast, hist, amax, ctl buffer.Buffer, n, l int, r fp8.Recipe) error {
	return b.ks.DelayedScales(b.s, b.ptr(scale), b.ptr(scaleInv), b.ptr(cast), b.ptr(hist), b.ptr(amax), b.ptr(ctl), n, l,
		r.Format, r.Margin, r.PowerOf2, r.HistoryReduce == fp8.HistoryMostRecent)
}

var _ backend.DelayedScaler = (*Backend)(nil)
