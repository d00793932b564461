package cuda

import icuda "github.com/distopt/distopt/internal/cuda"

// DevicePtr is an address in device memory.
type DevicePtr uint64

// Add returns p advanced by off bytes.
func (p DevicePtr) Add(off int) DevicePtr { return p + DevicePtr(off) }

// Alloc allocates n bytes of device memory, not cleared. Free releases them.
func (d *Device) Alloc(n int) (DevicePtr, error) {
	p, err := d.d.Alloc(n)
	return DevicePtr(p), err
}

// Free releases memory from Alloc.
func (d *Device) Free(p DevicePtr) error { return d.d.Free(icuda.DevicePtr(p)) }

// HostBuffer is page-locked ("pinned") host memory, which the
// asynchronous copies CopyHtoD and CopyDtoH need.
type HostBuffer struct {
	h *icuda.HostBuffer
}

// AllocHost allocates n bytes of pinned host memory for the copies of d's
// streams (a copy on another device's stream panics). n must be positive.
// Its contents are undefined; Free releases it.
func (d *Device) AllocHost(n int) (*HostBuffer, error) {
	h, err := d.d.AllocHost(n)
	if err != nil {
		return nil, err
	}
	return &HostBuffer{h: h}, nil
}

// Bytes returns the buffer's memory. The slice must not be used after Free.
func (h *HostBuffer) Bytes() []byte { return h.h.Bytes() }

// Len returns the buffer's size in bytes.
func (h *HostBuffer) Len() int { return h.h.Len() }

// Free releases the buffer. A second Free panics.
func (h *HostBuffer) Free() error { return h.h.Free() }
