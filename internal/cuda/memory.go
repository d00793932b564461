package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// DevicePtr is an address in device memory (a CUdeviceptr).
type DevicePtr uint64

// Add returns p advanced by off bytes.
func (p DevicePtr) Add(off int) DevicePtr { return p + DevicePtr(off) }

// resources tracks what a Device handed out.
type resources struct {
	mu     sync.Mutex
	dev    map[DevicePtr]int // allocation base -> size
	host   map[*HostBuffer]struct{}
	counts Usage // Streams, Events, Modules, DeviceBytes, HostBytes
}

func (r *resources) init() {
	r.dev = make(map[DevicePtr]int)
	r.host = make(map[*HostBuffer]struct{})
}

// Alloc allocates n bytes of device memory (cuMemAlloc: aligned to at least
// 256 bytes, contents undefined). n must be positive.
func (d *Device) Alloc(n int) (DevicePtr, error) {
	if n <= 0 {
		panic(fmt.Sprintf("cuda: Alloc of %d bytes", n))
	}
	var p DevicePtr
	err := d.Do(func() error {
		var r Result
		p, r = cuMemAlloc(n)
		return check("cuMemAlloc", r)
	})
	if err != nil {
		return 0, fmt.Errorf("%w (%d bytes)", err, n)
	}
	d.res.mu.Lock()
	d.res.dev[p] = n
	d.res.counts.DeviceBytes += n
	d.res.mu.Unlock()
	return p, nil
}

// Free releases memory returned by Alloc. It panics if p is not the base of
// a live allocation of this device.
func (d *Device) Free(p DevicePtr) error {
	d.res.mu.Lock()
	n, ok := d.res.dev[p]
	if ok {
		delete(d.res.dev, p)
		d.res.counts.DeviceBytes -= n
	}
	d.res.mu.Unlock()
	if !ok {
		panic(fmt.Sprintf("cuda: Free of %#x, not an allocation of device %d", uint64(p), d.info.Ordinal))
	}
	return d.Do(func() error { return check("cuMemFree", cuMemFree(p)) })
}

// HostBuffer is page-locked ("pinned") host memory, usable by asynchronous
// copies of any device (it is allocated portable).
type HostBuffer struct {
	d   *Device
	p   unsafe.Pointer
	n   int
	buf []byte
}

// cuMemHostAllocPortable makes pinned memory usable from every context.
const cuMemHostAllocPortable = 0x01

// AllocHost allocates n bytes of pinned host memory (cuMemHostAlloc,
// portable). n must be positive. Its contents are undefined.
func (d *Device) AllocHost(n int) (*HostBuffer, error) {
	if n <= 0 {
		panic(fmt.Sprintf("cuda: AllocHost of %d bytes", n))
	}
	var p unsafe.Pointer
	err := d.Do(func() error {
		var r Result
		p, r = cuMemHostAlloc(n, cuMemHostAllocPortable)
		return check("cuMemHostAlloc", r)
	})
	if err != nil {
		return nil, fmt.Errorf("%w (%d bytes)", err, n)
	}
	h := &HostBuffer{d: d, p: p, n: n, buf: unsafe.Slice((*byte)(p), n)}
	d.res.mu.Lock()
	d.res.host[h] = struct{}{}
	d.res.counts.HostBytes += n
	d.res.mu.Unlock()
	return h, nil
}

// Bytes returns the buffer's memory. The slice must not be used after Free.
func (h *HostBuffer) Bytes() []byte { return h.buf }

// Len returns the buffer's size in bytes.
func (h *HostBuffer) Len() int { return h.n }

// Free releases the buffer. A second Free panics.
func (h *HostBuffer) Free() error {
	d := h.d
	d.res.mu.Lock()
	_, ok := d.res.host[h]
	if ok {
		delete(d.res.host, h)
		d.res.counts.HostBytes -= h.n
	}
	d.res.mu.Unlock()
	if !ok {
		panic("cuda: HostBuffer freed twice")
	}
	h.buf = nil
	return d.Do(func() error { return check("cuMemFreeHost", cuMemFreeHost(h.p)) })
}

// pinned reports whether b lies entirely inside a live HostBuffer of d.
func (d *Device) pinned(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	d.res.mu.Lock()
	defer d.res.mu.Unlock()
	for h := range d.res.host {
		base := uintptr(h.p)
		if lo >= base && hi <= base+uintptr(h.n) {
			return true
		}
	}
	return false
}

// Scalar is an element type that kernels and copies deal in.
type Scalar interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// Bytes returns the memory of s as bytes (no copy), for Upload, Download and
// the asynchronous copies.
func Bytes[T Scalar](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// View returns the memory of b as a slice of T (no copy), for reading a
// pinned HostBuffer as typed values. len(b) must be a multiple of T's size
// and b must be aligned for T; View panics otherwise.
func View[T Scalar](b []byte) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(b)%size != 0 {
		panic(fmt.Sprintf("cuda: View of %d bytes as %T", len(b), zero))
	}
	if len(b) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)%uintptr(size) != 0 {
		panic(fmt.Sprintf("cuda: View of unaligned memory as %T", zero))
	}
	return unsafe.Slice((*T)(p), len(b)/size)
}

// ptr returns the address of b's first byte; b must not be empty.
func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
