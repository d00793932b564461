package gpu

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
)

// table is the device copy of a segment table whose static part (offsets,
// modes, slots, and in a table over several shards their buffers) is fixed
// while its per-step part (the factors StepSize and Decay, which change with
// the learning-rate schedule, and the shards' moment seeds where a kernel
// reads them: shardTable) changes: new factors are copied into the same
// device buffer asynchronously, from pinned staging memory, in stream
// order, so a step allocates nothing and never waits for the GPU to upload
// them. A plan (plans.go) owns its table; the tables of direct Update and
// Cast calls are cached by their static part (Backend.table).
//
// A step queued while the stream is captured into a CUDA graph uses a
// second pair of buffers (gdev, gstaging), made with the table: the graph's
// copy node reads gstaging at each launch, so the host neither looks at nor
// waits for an event during the capture (a query is forbidden there), and
// the uncaptured steps' buffers and event stay untouched. A graph replays
// the factors of the step it captured; a later capture of the same table
// rewrites gstaging, which the earlier graph's launches then read.
type table struct {
	dev     cuda.DevicePtr
	staging *cuda.HostBuffer
	copied  *cuda.Event // recorded after the last copy out of staging
	copies  int         // copies out of staging queued so far
	stale   bool        // a plan's table: its host bytes differ from dev's
	last    []byte      // a cached table: the bytes on the device
	segs    int         // a cached table's layout (kernels.Table's Segs and Shards)
	shards  int

	gdev     cuda.DevicePtr   // the captured steps' device copy
	gstaging *cuda.HostBuffer // the captured steps' source, read at each launch
	captured bool             // a capture has used gdev: a graph may read it
}

// maxTables bounds the cache of segment tables; when it is full the cache
// is emptied (after a synchronization).
const maxTables = 64

// table returns the device copy of t for a direct Update or Cast call.
// Tables are cached by their static part; a table whose factors differ
// from the device copy's is copied again into the same buffer. During a
// capture the table must already be cached (a call taken before the
// capture made it): making one allocates, which a capture forbids. It runs
// in onWorker (b.mu held).
func (b *Backend) table(kind byte, t kernels.Table) (cuda.DevicePtr, error) {
	if t.Chunks == 0 {
		return 0, nil
	}
	capturing := b.s.CaptureBegun()
	e := b.recent[kind]
	if e == nil || e.segs != t.Segs || e.shards != t.Shards || !t.SameStatic(e.last) { // else the kind's last table: no key made
		key := string(kind) + string(t.StaticPart())
		var ok bool
		e, ok = b.tables[key]
		if !ok && capturing {
			return 0, errors.New("gpu: a segment table first needed during a CUDA graph capture: take one step (the same buckets and recipe) uncaptured before capturing")
		}
		if !ok {
			var err error
			if e, err = b.newTable(len(t.Bytes)); err != nil {
				return 0, err
			}
			e.segs, e.shards = t.Segs, t.Shards
			b.tables[key] = e
		}
		b.recent[kind] = e
	}
	if capturing {
		return e.uploadCaptured(b.s, t.Bytes)
	}
	if bytes.Equal(e.last, t.Bytes) {
		return e.dev, nil
	}
	if err := e.upload(b.s, t.Bytes); err != nil {
		return 0, err
	}
	e.last = append(e.last[:0], t.Bytes...)
	return e.dev, nil
}

// planned returns the device copy of a plan's table e whose host bytes are
// src, changed since the last call when changed: outside a capture e.dev,
// copied again only when stale; in a capture, the capture's copy. It runs
// in onWorker (b.mu held).
func (b *Backend) planned(e *table, src []byte, changed bool) (cuda.DevicePtr, error) {
	if e == nil {
		return 0, nil // a table without chunks
	}
	e.stale = e.stale || changed
	if b.s.CaptureBegun() {
		return e.uploadCaptured(b.s, src)
	}
	if e.stale {
		if err := e.upload(b.s, src); err != nil {
			return 0, err
		}
		e.stale = false
	}
	return e.dev, nil
}

// upload queues the copy of src into e.dev through e.staging, once the
// previous copy out of the staging memory has completed.
func (e *table) upload(s *cuda.Stream, src []byte) error {
	if e.copies > 0 {
		// The staging memory is free once the previous copy out of it has
		// completed: usually long ago (a step's host wait came since), so
		// look before waiting.
		done, err := e.copied.Query()
		if err == nil && !done {
			err = e.copied.Synchronize()
		}
		if err != nil {
			return err
		}
	}
	stage := e.staging.Bytes()[:len(src)]
	copy(stage, src)
	if err := s.CopyHtoD(e.dev, stage); err != nil {
		return err
	}
	if err := e.copied.Record(s); err != nil {
		return err
	}
	e.copies++
	return nil
}

// uploadCaptured queues, in a capture, the copy of src into e.gdev from
// e.gstaging, which each launch of the graph reads, and returns e.gdev.
func (e *table) uploadCaptured(s *cuda.Stream, src []byte) (cuda.DevicePtr, error) {
	stage := e.gstaging.Bytes()[:len(src)]
	copy(stage, src)
	if err := s.CopyHtoD(e.gdev, stage); err != nil {
		return 0, err
	}
	e.captured = true
	return e.gdev, nil
}

// newTable allocates a cached table of n bytes, making room in the cache
// first (b.mu held).
func (b *Backend) newTable(n int) (*table, error) {
	if len(b.tables) >= maxTables {
		if err := b.dropTables(); err != nil {
			return nil, err
		}
	}
	return b.allocTable(n)
}

// allocTable allocates a table of n bytes.
func (b *Backend) allocTable(n int) (*table, error) {
	e := &table{}
	var err error
	if e.dev, err = b.dev.Alloc(n); err == nil {
		e.gdev, err = b.dev.Alloc(n)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("gpu: segment table: %w", err), e.free(b.dev))
	}
	if e.staging, err = b.dev.AllocHost(n); err == nil {
		e.gstaging, err = b.dev.AllocHost(n)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("gpu: segment table staging: %w", err), e.free(b.dev))
	}
	if e.copied, err = b.dev.NewEvent(false); err != nil {
		return nil, errors.Join(err, e.free(b.dev))
	}
	return e, nil
}

// releaseTable frees a plan's table once the stream is done with it; a
// table a capture used waits in b.retired until Close (a graph may still
// read its capture copy).
func (b *Backend) releaseTable(e *table) error {
	if e == nil {
		return nil
	}
	err := b.onWorker(func() error {
		delete(b.plans, e)
		err := b.s.Synchronize()
		if e.captured {
			b.retired = append(b.retired, e)
			return err
		}
		return errors.Join(err, e.free(b.dev))
	})
	if errors.Is(err, cuda.ErrClosed) {
		return nil // the backend's Close freed the table (freeTables)
	}
	return err
}

// free releases what e holds.
func (e *table) free(d *cuda.Device) error {
	var err error
	if e.copied != nil {
		err = e.copied.Destroy()
	}
	for _, h := range []*cuda.HostBuffer{e.staging, e.gstaging} {
		if h != nil {
			err = errors.Join(err, h.Free())
		}
	}
	for _, p := range []cuda.DevicePtr{e.dev, e.gdev} {
		if p != 0 {
			err = errors.Join(err, d.Free(p))
		}
	}
	return err
}

// dropTables waits for the stream and frees every cached table (b.mu held).
// Tables a capture used are kept aside until Close: a graph captured then
// may still be launched and read their capture copies.
func (b *Backend) dropTables() error {
	err := b.s.Synchronize()
	clear(b.recent)
	for k, e := range b.tables {
		if e.captured {
			b.retired = append(b.retired, e)
		} else {
			err = errors.Join(err, e.free(b.dev))
		}
		delete(b.tables, k)
	}
	return err
}

// freeTables frees every table, the retired ones and those of plans not
// closed yet too (b.mu held; Close).
func (b *Backend) freeTables() error {
	err := b.dropTables()
	for _, e := range b.retired {
		err = errors.Join(err, e.free(b.dev))
	}
	b.retired = nil
	for e := range b.plans {
		err = errors.Join(err, e.free(b.dev))
	}
	clear(b.plans)
	return err
}
