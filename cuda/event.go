package cuda

import (
	"time"

	icuda "github.com/distopt/distopt/internal/cuda"
)

// Event marks a point in a stream's work.
type Event struct {
	e *icuda.Event
}

// NewEvent creates an event; with timing it can measure Elapsed time.
// Destroy releases it.
func (d *Device) NewEvent(timing bool) (*Event, error) {
	e, err := d.d.NewEvent(timing)
	if err != nil {
		return nil, err
	}
	return &Event{e: e}, nil
}

// Record marks the work enqueued on s so far.
func (e *Event) Record(s *Stream) error { return e.e.Record(s.s) }

// Synchronize waits until the recorded work has completed.
func (e *Event) Synchronize() error { return e.e.Synchronize() }

// Query reports, without waiting, whether the recorded work has completed.
func (e *Event) Query() (bool, error) { return e.e.Query() }

// Destroy releases the event.
func (e *Event) Destroy() error { return e.e.Destroy() }

// Elapsed returns the device time between two completed timing events.
func Elapsed(start, end *Event) (time.Duration, error) { return icuda.Elapsed(start.e, end.e) }
