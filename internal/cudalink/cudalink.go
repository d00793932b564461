// Package cudalink converts between the handles of the public package cuda
// and those of internal/cuda, for the module's packages that take public
// handles and drive internal kernels with them.
package cudalink

import (
	"github.com/distopt/distopt/cuda"
	icuda "github.com/distopt/distopt/internal/cuda"
)

// Device returns the internal device behind d (nil for nil).
func Device(d *cuda.Device) *icuda.Device {
	if d == nil {
		return nil
	}
	return icuda.Public.Device(d)
}

// Stream returns the internal stream behind s (nil for nil).
func Stream(s *cuda.Stream) *icuda.Stream {
	if s == nil {
		return nil
	}
	return icuda.Public.Stream(s)
}

// PublicDevice returns the public handle of d, the same for every call.
func PublicDevice(d *icuda.Device) *cuda.Device {
	if d == nil {
		return nil
	}
	return icuda.Public.WrapDevice(d).(*cuda.Device)
}

// PublicStream returns the public handle of s, the same for every call.
func PublicStream(s *icuda.Stream) *cuda.Stream {
	if s == nil {
		return nil
	}
	return icuda.Public.WrapStream(s).(*cuda.Stream)
}

// Event returns the internal event behind e.
func Event(e *cuda.Event) *icuda.Event { return icuda.Public.Event(e) }

// HostBuffer returns the internal pinned buffer behind h.
func HostBuffer(h *cuda.HostBuffer) *icuda.HostBuffer { return icuda.Public.HostBuffer(h) }
