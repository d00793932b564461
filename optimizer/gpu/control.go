package gpu

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/internal/cuda"
)

// Control implements backend.Backend: one single-thread launch on the
// compute stream (kernels.Set.StepControl); the host reads nothing.
func (b *Backend) Control(ctl, stats buffer.Buffer) error {
	return b.ks.StepControl(b.s, b.ptr(ctl), b.ptr(stats))
}

// readback is the pinned memory and the event of ReadLater, made at its
// first call and reused.
type readback struct {
	host   *cuda.HostBuffer
	landed *cuda.Event
	n      int
	// captured: the copy was queued during a CUDA graph capture, so landed
	// was recorded inside the graph and cannot be queried; the copy lands
	// when a launch of the graph has run, which the host learns from the
	// stream (the graph is launched on it).
	captured bool
	s        *cuda.Stream
}

// ReadLater implements backend.AsyncReader: a copy into pinned host
// memory queued on the compute stream, and an event recorded after it.
// Neither waits for the GPU, so a step whose decision stays on the device
// (and a CUDA graph captured from it) has no host synchronisation. One
// hand-over to the device's worker.
func (b *Backend) ReadLater(src buffer.Buffer, n int) (backend.PendingRead, error) {
	var rb *readback
	err := b.onWorker(func() error {
		err := b.readLater(src, n)
		rb = b.rb
		return err
	})
	if err != nil {
		return nil, err
	}
	return rb, nil
}

// readLater is ReadLater in onWorker.
func (b *Backend) readLater(src buffer.Buffer, n int) error {
	capturing := b.s.CaptureBegun()
	if err := b.readbackFor(n); err != nil {
		return err
	}
	b.rb.n, b.rb.captured, b.rb.s = n, capturing, b.s
	if capturing {
		// Until a launch of the graph overwrites it, the block reads as
		// "not written" (no real block is all ones: its step count would
		// be -1), so reading the result before a launch fails instead of
		// returning the block of an earlier step.
		raw := b.rb.host.Bytes()[:n]
		for i := range raw {
			raw[i] = notWrittenByte
		}
	}
	if err := b.s.CopyDtoH(b.rb.host.Bytes()[:n], b.ptr(src)); err != nil {
		return err
	}
	if err := b.rb.landed.Record(b.s); err != nil {
		return err
	}
	return nil
}

// readbackMin is the size of the read-back memory New allocates, so that
// ReadLater of a control block allocates nothing (cuMemHostAlloc may
// synchronise the device).
const readbackMin = 256

// readbackFor makes b.rb hold at least n bytes (b.mu held, or b not shared
// yet).
func (b *Backend) readbackFor(n int) error {
	if b.rb != nil && b.rb.host.Len() >= n {
		return nil
	}
	if err := b.freeReadback(); err != nil {
		return err
	}
	rb := &readback{}
	var err error
	if rb.host, err = b.dev.AllocHost(max(n, readbackMin)); err != nil {
		return fmt.Errorf("gpu: read-back memory: %w", err)
	}
	if rb.landed, err = b.dev.NewEvent(false); err != nil {
		rb.host.Free()
		return err
	}
	b.rb = rb
	return nil
}

// Done implements backend.PendingRead: a query of the event (of the
// stream for a copy a graph captured).
func (r *readback) Done() (bool, error) {
	if r.captured {
		return r.s.Query()
	}
	return r.landed.Query()
}

// Bytes implements backend.PendingRead: the copy's bytes, after waiting
// for the event when it has not completed (a host synchronisation; for a
// copy a graph captured, for the stream the graph was launched on).
func (r *readback) Bytes() ([]byte, error) {
	done, err := r.Done()
	if err == nil && !done {
		if r.captured {
			err = r.s.Synchronize()
		} else {
			err = r.landed.Synchronize()
		}
	}
	if err != nil {
		return nil, err
	}
	raw := r.host.Bytes()[:r.n]
	if r.captured && notWritten(raw) {
		return nil, errors.New("gpu: the step control block of a captured step has not been written: launch the graph on the backend's stream before reading the step's result")
	}
	return raw, nil
}

// notWrittenByte fills a captured read-back until a launch writes it.
const notWrittenByte = 0xff

// notWritten reports whether raw still holds the all-ones pattern ReadLater
// leaves in a captured read-back.
func notWritten(raw []byte) bool {
	for _, c := range raw {
		if c != notWrittenByte {
			return false
		}
	}
	return true
}

// freeReadback waits for the stream and frees the read-back memory (b.mu
// held).
func (b *Backend) freeReadback() error {
	if b.rb == nil {
		return nil
	}
	err := errors.Join(b.s.Synchronize(), b.rb.landed.Destroy(), b.rb.host.Free())
	b.rb = nil
	return err
}

var _ backend.AsyncReader = (*Backend)(nil)
