package cuda

import (
	"sync"

	icuda "github.com/distopt/distopt/internal/cuda"
)

// Stream is a queue of work on one device, run in order.
type Stream struct {
	s *icuda.Stream
}

// streams maps each internal stream to its one public Stream.
var streams sync.Map // *icuda.Stream -> *Stream

func wrapStream(s *icuda.Stream) *Stream {
	if s == nil {
		return nil
	}
	p, _ := streams.LoadOrStore(s, &Stream{s: s})
	return p.(*Stream)
}

// NewStream creates a stream that does not synchronize with the legacy
// default stream. Destroy releases it.
func (d *Device) NewStream() (*Stream, error) {
	s, err := d.d.NewStream()
	if err != nil {
		return nil, err
	}
	return wrapStream(s), nil
}

// Device returns the device of the stream.
func (s *Stream) Device() *Device { return wrapDevice(s.s.Device()) }

// Handle returns the CUstream, for other bindings.
func (s *Stream) Handle() uintptr { return s.s.Handle() }

// Destroy waits for the stream's work and releases it.
func (s *Stream) Destroy() error {
	err := s.s.Destroy()
	streams.Delete(s.s)
	return err
}

// Synchronize waits until the stream's work has completed.
func (s *Stream) Synchronize() error { return s.s.Synchronize() }

// Wait makes later work on s wait for e's recorded work.
func (s *Stream) Wait(e *Event) error { return s.s.Wait(e.e) }

// Upload copies src to dst and returns once the copy is done. src may be
// ordinary Go memory.
func (s *Stream) Upload(dst DevicePtr, src []byte) error {
	return s.s.Upload(icuda.DevicePtr(dst), src)
}

// Download copies len(dst) bytes from src and returns once they are in dst.
func (s *Stream) Download(dst []byte, src DevicePtr) error {
	return s.s.Download(dst, icuda.DevicePtr(src))
}

// CopyHtoD enqueues a copy of src to dst and returns at once. src must lie
// in a HostBuffer of the stream's device (it panics otherwise) and must
// not change until the copy is done (an Event recorded after it).
func (s *Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	return s.s.CopyHtoD(icuda.DevicePtr(dst), src)
}

// CopyDtoH enqueues a copy of len(dst) bytes from src into dst and returns
// at once. dst must lie in a HostBuffer of the stream's device (it panics
// otherwise); read it once the copy is done.
func (s *Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	return s.s.CopyDtoH(dst, icuda.DevicePtr(src))
}

// CopyDtoD enqueues a copy of n bytes from src to dst.
func (s *Stream) CopyDtoD(dst, src DevicePtr, n int) error {
	return s.s.CopyDtoD(icuda.DevicePtr(dst), icuda.DevicePtr(src), n)
}

// Memset8 enqueues the setting of n bytes at dst to v.
func (s *Stream) Memset8(dst DevicePtr, v uint8, n int) error {
	return s.s.Memset8(icuda.DevicePtr(dst), v, n)
}

// Memset32 enqueues the setting of n 32-bit words at dst to v.
func (s *Stream) Memset32(dst DevicePtr, v uint32, n int) error {
	return s.s.Memset32(icuda.DevicePtr(dst), v, n)
}
