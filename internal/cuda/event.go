package cuda

import "time"

// Event marks a point in a stream's work (a CUevent).
type Event struct {
	d *Device
	h uintptr
}

// Event creation flags of the driver.
const (
	cuEventDefault       = 0x0
	cuEventDisableTiming = 0x2
)

// NewEvent creates an event. With timing false the event cannot be used by
// Elapsed but costs less to record and wait on.
func (d *Device) NewEvent(timing bool) (*Event, error) {
	flags := uint32(cuEventDefault)
	if !timing {
		flags = cuEventDisableTiming
	}
	e := &Event{d: d}
	err := d.Do(func() error {
		var r Result
		e.h, r = cuEventCreate(flags)
		return check("cuEventCreate", r)
	})
	if err != nil {
		return nil, err
	}
	d.res.count(&d.res.counts.Events, 1)
	return e, nil
}

// Handle returns the raw CUevent.
func (e *Event) Handle() uintptr { return e.h }

// Record captures in e the work queued on s so far; e completes when that
// work has finished. The stream must belong to the event's device.
func (e *Event) Record(s *Stream) error {
	if s.d != e.d {
		panic("cuda: Event.Record on a stream of another device")
	}
	return e.d.Do(func() error { return check("cuEventRecord", cuEventRecord(e.h, s.h)) })
}

// Synchronize waits until e has completed.
func (e *Event) Synchronize() error {
	e.d.syncs.Add(1)
	return e.d.Do(func() error { return check("cuEventSynchronize", cuEventSynchronize(e.h)) })
}

// Query reports whether e has completed, without waiting.
func (e *Event) Query() (bool, error) {
	r := ErrorNotReady
	if err := e.d.Do(func() error { r = cuEventQuery(e.h); return nil }); err != nil {
		return false, err
	}
	return queried("cuEventQuery", r)
}

// Destroy releases the event. Destroying twice panics.
func (e *Event) Destroy() error {
	if e.h == 0 {
		panic("cuda: Event destroyed twice")
	}
	h := e.h
	e.h = 0
	e.d.res.count(&e.d.res.counts.Events, -1)
	return e.d.Do(func() error { return check("cuEventDestroy", cuEventDestroy(h)) })
}

// Elapsed returns the time between two completed timing events of the same
// device, with the driver's resolution of about half a microsecond.
func Elapsed(start, end *Event) (time.Duration, error) {
	var ms float32
	err := start.d.Do(func() error {
		var r Result
		ms, r = cuEventElapsedTime(start.h, end.h)
		return check("cuEventElapsedTime", r)
	})
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}
