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
