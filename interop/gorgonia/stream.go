//go:build gorgonia

package cuinterop

import (
	"fmt"
	"unsafe"

	"github.com/distopt/distopt/optimizer/gpu"
	"gorgonia.org/cu"
)

// FromStream returns the raw CUstream handle of s (0 for cu.NoStream, the
// legacy default stream), as distopt's streams report theirs (Handle).
func FromStream(s cu.Stream) uintptr { return *(*uintptr)(unsafe.Pointer(&s)) }

// ToStream returns the raw CUstream h (for example gpu.Backend.Stream()
// .Handle()) as a gorgonia stream, on which gorgonia can queue work and
// wait. The stream stays its creator's: do not Destroy it.
func ToStream(h uintptr) cu.Stream { return *(*cu.Stream)(unsafe.Pointer(&h)) }

// FromEvent returns the raw CUevent handle of e.
func FromEvent(e cu.Event) uintptr { return *(*uintptr)(unsafe.Pointer(&e)) }

// ToEvent returns the raw CUevent h (for example the Handle of a distopt
// event) as a gorgonia event. The event stays its creator's: do not
// Destroy it.
func ToEvent(h uintptr) cu.Event { return *(*cu.Event)(unsafe.Pointer(&h)) }

// BackendWait makes work queued on b's stream after this call (the next
// Step's gradient reads, for instance) wait until the work queued on s so
// far has completed. It records an event on s and queues a wait for it on
// b's stream; the host does not block. s must belong to b's GPU, in its
// primary context.
func BackendWait(b *gpu.Backend, s cu.Stream) error {
	return order(b, s, ToStream(b.Stream().Handle()))
}

// WaitBackend makes work queued on s after this call wait until the work
// queued on b's stream so far has completed, without blocking the host. s
// must belong to b's GPU, in its primary context.
func WaitBackend(s cu.Stream, b *gpu.Backend) error {
	return order(b, ToStream(b.Stream().Handle()), s)
}

// order makes later work on after wait for the work queued on before so
// far, with an event created and released on b's device thread.
func order(b *gpu.Backend, before, after cu.Stream) error {
	return Do(b, func() error {
		ev, err := cu.MakeEvent(cu.DisableTiming)
		if err != nil {
			return fmt.Errorf("cuinterop: creating an event: %w", err)
		}
		// Destroying an event whose wait is queued is allowed: the driver
		// releases it once it has completed.
		defer cu.DestroyEvent(&ev)
		if err := ev.Record(before); err != nil {
			return fmt.Errorf("cuinterop: recording an event: %w", err)
		}
		if err := after.Wait(ev, 0); err != nil {
			return fmt.Errorf("cuinterop: waiting on an event: %w", err)
		}
		return nil
	})
}
