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
// reads them: shardTable) changes (kernels.Table.StaticPart): new factors
// are copied into the same device buffer asynchronously, from pinned
// staging memory, in stream order, so a step allocates nothing and never
// waits for the GPU to upload them.
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
	last    []byte      // the bytes on the device
	segs    int         // the layout of the table (kernels.Table's Segs and Shards)
	shards  int

	gdev     cuda.DevicePtr   // the captured steps' device copy
	gstaging *cuda.HostBuffer // the captured steps' source, read at each launch
	captured bool             // a capture has used gdev: a graph may read it
}

// maxTables bounds the cache of segment tables; when it is full the cache
// is emptied (after a synchronization).
const maxTables = 64

// table returns the device copy of t. Tables are cached by their static
// part; a table whose factors differ from the device copy's is copied again
// into the same buffer, after the previous copy out of the staging memory
// has completed. During a capture the table must already be cached (a step
// taken before the capture made it): making one allocates, which a capture
// forbids. It runs in onWorker (b.mu held).
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
		stage := e.gstaging.Bytes()[:len(t.Bytes)]
		copy(stage, t.Bytes)
		if err := b.s.CopyHtoD(e.gdev, stage); err != nil {
			return 0, err
		}
		e.captured = true
		return e.gdev, nil
	}
	if bytes.Equal(e.last, t.Bytes) {
		return e.dev, nil
	}
	if e.last != nil {
		// The staging memory is free once the previous copy out of it has
		// completed: usually long ago (a step's host wait came since), so
		// look before waiting.
		done, err := e.copied.Query()
		if err == nil && !done {
			err = e.copied.Synchronize()
		}
		if err != nil {
			return 0, err
		}
	}
	stage := e.staging.Bytes()[:len(t.Bytes)]
	copy(stage, t.Bytes)
	if err := b.s.CopyHtoD(e.dev, stage); err != nil {
		return 0, err
	}
	if err := e.copied.Record(b.s); err != nil {
		return 0, err
	}
	e.last = append(e.last[:0], t.Bytes...)
	return e.dev, nil
}

// newTable allocates a table of n bytes, making room in the cache first
// (b.mu held).
func (b *Backend) newTable(n int) (*table, error) {
	if len(b.tables) >= maxTables {
		if err := b.dropTables(); err != nil {
			return nil, err
		}
	}
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

// freeTables frees every table, the retired ones too (b.mu held; Close).
func (b *Backend) freeTables() error {
	err := b.dropTables()
	for _, e := range b.retired {
		err = errors.Join(err, e.free(b.dev))
	}
	b.retired = nil
	return err
}
