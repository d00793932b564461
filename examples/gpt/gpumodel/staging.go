package gpumodel

import (
	"errors"
	"fmt"
	"math"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/kernels"
)

// This file holds the model's traffic with the host that must not wait for
// the stream: a micro-batch's tokens go up, and its loss comes back, through
// pinned host memory with copies queued in stream order, so the host can
// queue the next micro-batch (and the optimizer's step) while the device
// still runs the previous one.

// uploadSlots is how many micro-batches' uploads may be in flight: the host
// fills one slot while the device copies out of the other.
const uploadSlots = 2

// staging is pinned host memory and the event recorded after the last copy
// out of it (an upload) or into it (a read-back).
type staging struct {
	buf  *cuda.HostBuffer
	done *cuda.Event
	used bool // done has been recorded
}

func newStaging(d *cuda.Device, n int) (*staging, error) {
	buf, err := d.AllocHost(n)
	if err != nil {
		return nil, fmt.Errorf("gpumodel: staging memory: %w", err)
	}
	done, err := d.NewEvent(false)
	if err != nil {
		return nil, errors.Join(err, buf.Free())
	}
	return &staging{buf: buf, done: done}, nil
}

// wait returns once the last copy out of or into s has completed: a query
// first, a host wait only when the device has not got that far.
func (s *staging) wait() error {
	if !s.used {
		return nil
	}
	done, err := s.done.Query()
	if err == nil && !done {
		err = s.done.Synchronize()
	}
	return err
}

func (s *staging) free() error { return errors.Join(s.done.Destroy(), s.buf.Free()) }

// uploadBytes is the size of an upload slot: tokens, targets and the token
// rows' order (rows each), and the vocabulary's row starts (Vocab + 1).
func (m *Model) uploadBytes() int { return 4 * (3*m.rows + m.cfg.Vocab + 1) }

// upload checks a micro-batch's tokens and targets and queues their upload,
// with the rows of each token for the embedding's gradient, from the next
// upload slot: the host waits only if the device has not yet copied out of
// that slot (an upload uploadSlots micro-batches ago).
func (m *Model) upload(tokens, targets []int32) error {
	if len(tokens) != m.rows || len(targets) != m.rows {
		return fmt.Errorf("gpumodel: %d tokens and %d targets, want %d", len(tokens), len(targets), m.rows)
	}
	for i := range tokens {
		if tokens[i] < 0 || int(tokens[i]) >= m.cfg.Vocab || targets[i] < 0 || int(targets[i]) >= m.cfg.Vocab {
			return fmt.Errorf("gpumodel: token %d or target %d at %d outside the vocabulary", tokens[i], targets[i], i)
		}
	}
	if m.up[m.upNext] == nil {
		st, err := newStaging(m.d, m.uploadBytes())
		if err != nil {
			return err
		}
		m.up[m.upNext] = st
	}
	st := m.up[m.upNext]
	m.upNext = (m.upNext + 1) % uploadSlots
	if err := st.wait(); err != nil {
		return err
	}
	order, start := kernels.TokenRows(tokens, m.cfg.Vocab)
	mem := st.buf.Bytes()
	var err error
	queued := false
	for _, u := range []struct {
		dst cuda.DevicePtr
		src []int32
	}{{m.tok, tokens}, {m.tgt, targets}, {m.order, order}, {m.start, start}} {
		n := copy(mem, cuda.Bytes(u.src))
		if err = m.s.CopyHtoD(u.dst, mem[:n]); err != nil {
			break
		}
		queued = true
		mem = mem[n:]
	}
	if queued { // the slot's next user waits for whatever was queued out of it
		st.used = true
		err = errors.Join(err, st.done.Record(m.s))
	}
	return err
}

// PendingLoss is a micro-batch's loss on its way to the host (LossLater).
type PendingLoss struct {
	m    *Model
	st   *staging
	read bool
}

// LossLater queues the copy of the last Forward's per-token losses into
// pinned host memory and returns at once; Value waits for that copy (not
// for later work) and sums them. Call it after Forward and before the next
// Forward (which overwrites the losses); a Backward may come between.
func (m *Model) LossLater() (*PendingLoss, error) {
	var st *staging
	if n := len(m.lossFree); n > 0 {
		st, m.lossFree = m.lossFree[n-1], m.lossFree[:n-1]
	} else {
		var err error
		if st, err = newStaging(m.d, 4*m.rows); err != nil {
			return nil, err
		}
		m.lossAll = append(m.lossAll, st)
	}
	if err := m.s.CopyDtoH(st.buf.Bytes(), m.losses); err != nil {
		m.lossFree = append(m.lossFree, st)
		return nil, err
	}
	st.used = true
	if err := st.done.Record(m.s); err != nil {
		return nil, err
	}
	return &PendingLoss{m: m, st: st}, nil
}

// Value returns the micro-batch's mean loss (what Loss returns), waiting
// for its copy if needed. A second call is an error.
func (p *PendingLoss) Value() (float64, error) {
	if p.read {
		return 0, errors.New("gpumodel: PendingLoss.Value called twice")
	}
	p.read = true
	if err := p.st.wait(); err != nil {
		return math.NaN(), err
	}
	s := 0.0
	for _, v := range cuda.View[float32](p.st.buf.Bytes()) {
		s += float64(v)
	}
	p.m.lossFree = append(p.m.lossFree, p.st)
	return s / float64(p.m.rows), nil
}

// freeStaging releases the upload slots and the read-back memory (Close).
func (m *Model) freeStaging() error {
	var errs []error
	for i, st := range m.up {
		if st != nil {
			errs = append(errs, st.free())
			m.up[i] = nil
		}
	}
	for _, st := range m.lossAll {
		errs = append(errs, st.free())
	}
	m.lossAll, m.lossFree = nil, nil
	return errors.Join(errs...)
}
