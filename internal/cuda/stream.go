package cuda

import (
	"fmt"
	"sync/atomic"
)

// Stream is a queue of device work (a CUstream). Streams are created
// non-blocking: they do not synchronize with the legacy default stream.
// Work queued on one stream runs in order; order across streams only through
// events (Event.Record, Stream.Wait).
type Stream struct {
	d     *Device
	h     uintptr
	begun atomic.Bool // BeginCapture succeeded, EndCapture not called yet
}

// cuStreamNonBlocking is CU_STREAM_NON_BLOCKING.
const cuStreamNonBlocking = 0x1

// NewStream creates a stream on the device.
func (d *Device) NewStream() (*Stream, error) {
	s := &Stream{d: d}
	err := d.Do(func() error {
		var r Result
		s.h, r = cuStreamCreate(cuStreamNonBlocking)
		return check("cuStreamCreate", r)
	})
	if err != nil {
		return nil, err
	}
	d.res.count(&d.res.counts.Streams, 1)
	return s, nil
}

func (r *resources) count(c *int, delta int) {
	r.mu.Lock()
	*c += delta
	r.mu.Unlock()
}

// Device returns the stream's device.
func (s *Stream) Device() *Device { return s.d }

// Handle returns the raw CUstream, for other CUDA libraries (NCCL).
func (s *Stream) Handle() uintptr { return s.h }

// Destroy releases the stream once its queued work is done (the call does
// not wait). Destroying twice panics.
func (s *Stream) Destroy() error {
	if s.h == 0 {
		panic("cuda: Stream destroyed twice")
	}
	h := s.h
	s.h = 0
	s.d.res.count(&s.d.res.counts.Streams, -1)
	return s.d.Do(func() error { return check("cuStreamDestroy", cuStreamDestroy(h)) })
}

// Synchronize waits until all work queued on the stream has finished and
// returns the first asynchronous error, if any.
func (s *Stream) Synchronize() error {
	s.d.syncs.Add(1)
	return s.d.Do(func() error { return check("cuStreamSynchronize", cuStreamSynchronize(s.h)) })
}

// Query reports whether all work queued on the stream has finished, without
// waiting.
func (s *Stream) Query() (bool, error) {
	r := ErrorNotReady
	if err := s.d.Do(func() error { r = cuStreamQuery(s.h); return nil }); err != nil {
		return false, err
	}
	return queried("cuStreamQuery", r)
}

// Wait makes work queued on s after this call wait until e has completed (as
// recorded at the time of the call). It does not block the host.
func (s *Stream) Wait(e *Event) error {
	return s.d.Do(func() error { return check("cuStreamWaitEvent", cuStreamWaitEvent(s.h, e.h)) })
}

// WaitValue32 makes work queued on s after this call wait until the 32-bit
// word at device address addr is at least v in the driver's cyclic order
// (cuStreamWaitValue32, CU_STREAM_WAIT_VALUE_GEQ: (int32)(word - v) >= 0,
// so that counters may wrap around: 0xffffffff is below 1). It does not block the
// host. Unlike Wait on an event, the word may be written after this call
// (by WriteValue32 on another stream, or by the host): a stream can be
// ordered after work not yet queued. Whatever writes the word must come,
// or s waits forever.
func (s *Stream) WaitValue32(addr DevicePtr, v uint32) error {
	return s.d.Do(func() error { return check("cuStreamWaitValue32", cuStreamWaitValue32(s.h, addr, v, 0)) })
}

// WriteValue32 queues on s the write of v to the 32-bit word at device
// address addr (cuStreamWriteValue32), after the work queued before it.
func (s *Stream) WriteValue32(addr DevicePtr, v uint32) error {
	return s.d.Do(func() error { return check("cuStreamWriteValue32", cuStreamWriteValue32(s.h, addr, v, 0)) })
}

// Upload copies src (any host memory, Go memory included) to device address
// dst, after the work queued on s, and returns when the copy has completed.
func (s *Stream) Upload(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	s.d.syncs.Add(1)
	return s.d.Do(func() error {
		if err := check("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync(dst, ptr(src), len(src), s.h)); err != nil {
			return err
		}
		return check("cuStreamSynchronize", cuStreamSynchronize(s.h))
	})
}

// Download copies len(dst) bytes from device address src into dst (any host
// memory), after the work queued on s, and returns when the copy has
// completed.
func (s *Stream) Download(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	s.d.syncs.Add(1)
	return s.d.Do(func() error {
		if err := check("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync(ptr(dst), src, len(dst), s.h)); err != nil {
			return err
		}
		return check("cuStreamSynchronize", cuStreamSynchronize(s.h))
	})
}

// CopyHtoD queues a copy of src to device address dst on s and returns at
// once. src must lie inside a HostBuffer of the stream's device (it panics
// otherwise) and must stay untouched until the copy has completed.
func (s *Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	s.mustPinned("CopyHtoD", src)
	if len(src) == 0 {
		return nil
	}
	return s.d.Do(func() error {
		return check("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync(dst, ptr(src), len(src), s.h))
	})
}

// CopyDtoH queues a copy of len(dst) bytes from device address src into dst
// on s and returns at once. dst must lie inside a HostBuffer of the stream's
// device (it panics otherwise); read it only after the copy has completed.
func (s *Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	s.mustPinned("CopyDtoH", dst)
	if len(dst) == 0 {
		return nil
	}
	return s.d.Do(func() error {
		return check("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync(ptr(dst), src, len(dst), s.h))
	})
}

func (s *Stream) mustPinned(op string, b []byte) {
	if !s.d.pinned(b) {
		panic(fmt.Sprintf("cuda: Stream.%s with host memory that is not a HostBuffer of device %d", op, s.d.info.Ordinal))
	}
}

// CopyDtoD queues a copy of n bytes from device address src to dst on s.
func (s *Stream) CopyDtoD(dst, src DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	return s.d.Do(func() error { return check("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync(dst, src, n, s.h)) })
}

// Memset8 queues the setting of n bytes at dst to v on s.
func (s *Stream) Memset8(dst DevicePtr, v uint8, n int) error {
	if n == 0 {
		return nil
	}
	return s.d.Do(func() error { return check("cuMemsetD8Async", cuMemsetD8Async(dst, v, n, s.h)) })
}

// Memset32 queues the setting of n 32-bit words at dst (4-byte aligned) to v
// on s.
func (s *Stream) Memset32(dst DevicePtr, v uint32, n int) error {
	if n == 0 {
		return nil
	}
	return s.d.Do(func() error { return check("cuMemsetD32Async", cuMemsetD32Async(dst, v, n, s.h)) })
}
