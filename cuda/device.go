package cuda

import (
	"fmt"
	"sync"

	icuda "github.com/distopt/distopt/internal/cuda"
)

// Device is one GPU, opened with Open.
type Device struct {
	d *icuda.Device
}

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Ordinal      int    // index among the devices the driver sees
	Name         string // for example "NVIDIA H200"
	PCIBusID     string // for example "0000:1B:00.0"
	Major, Minor int    // compute capability
	TotalMemory  uint64 // bytes of device memory
	// Multiprocessors is the number of streaming multiprocessors.
	Multiprocessors int
}

// AtLeast reports whether the compute capability is major.minor or newer.
func (i DeviceInfo) AtLeast(major, minor int) bool {
	return i.Major > major || i.Major == major && i.Minor >= minor
}

func (i DeviceInfo) String() string {
	return fmt.Sprintf("%d: %s (sm_%d%d, %d SMs, %.1f GiB, %s)", i.Ordinal, i.Name, i.Major, i.Minor,
		i.Multiprocessors, float64(i.TotalMemory)/(1<<30), i.PCIBusID)
}

// DeviceCount returns the number of GPUs the driver sees. Without a GPU it
// returns an error matching ErrNoDriver or ErrNoDevice.
func DeviceCount() (int, error) { return icuda.DeviceCount() }

// Devices describes every GPU the driver sees, without opening any (no
// context is made). Without a GPU it returns an error matching
// ErrNoDriver or ErrNoDevice.
func Devices() ([]DeviceInfo, error) {
	infos, err := icuda.Devices()
	if err != nil {
		return nil, err
	}
	out := make([]DeviceInfo, len(infos))
	for i, in := range infos {
		out[i] = publicInfo(in)
	}
	return out, nil
}

// Open opens GPU ordinal and retains its primary context. Close releases it.
func Open(ordinal int) (*Device, error) {
	d, err := icuda.Open(ordinal)
	if err != nil {
		return nil, err
	}
	return wrapDevice(d), nil
}

// Close waits for the device's work and releases its context. The Device
// and every object made from it are unusable afterwards.
func (d *Device) Close() error {
	err := d.d.Close()
	devices.Delete(d.d)
	return err
}

// Ordinal returns the index of the device among those the driver sees.
func (d *Device) Ordinal() int { return d.d.Ordinal() }

// Info describes the device.
func (d *Device) Info() DeviceInfo { return publicInfo(d.d.Info()) }

func publicInfo(i icuda.DeviceInfo) DeviceInfo {
	return DeviceInfo{Ordinal: i.Ordinal, Name: i.Name, PCIBusID: i.PCIBusID, Major: i.Major, Minor: i.Minor,
		TotalMemory: i.TotalMemory, Multiprocessors: i.Multiprocessors}
}

// MemInfo returns the free and total bytes of device memory.
func (d *Device) MemInfo() (free, total uint64, err error) { return d.d.MemInfo() }

// Synchronize waits until all work on the device has completed.
func (d *Device) Synchronize() error { return d.d.Synchronize() }

// Do runs fn on the device's worker thread, with its context current. The
// calls fn makes on the device then skip the hand-off to that thread that
// each call from another goroutine pays (some microseconds: more than many
// small kernels take on the GPU). fn must not wait for other goroutines
// that use the device.
func (d *Device) Do(fn func() error) error { return d.d.Do(fn) }

// devices maps each open internal device to its one public Device, so that
// a device handed back by a library is the one the caller opened.
var devices sync.Map // *icuda.Device -> *Device

func wrapDevice(d *icuda.Device) *Device {
	if d == nil {
		return nil
	}
	p, _ := devices.LoadOrStore(d, &Device{d: d})
	return p.(*Device)
}

func init() {
	icuda.Public.Device = func(p any) *icuda.Device { return p.(*Device).d }
	icuda.Public.Stream = func(p any) *icuda.Stream { return p.(*Stream).s }
	icuda.Public.WrapDevice = func(d *icuda.Device) any { return wrapDevice(d) }
	icuda.Public.WrapStream = func(s *icuda.Stream) any { return wrapStream(s) }
	icuda.Public.Event = func(p any) *icuda.Event { return p.(*Event).e }
	icuda.Public.HostBuffer = func(p any) *icuda.HostBuffer { return p.(*HostBuffer).h }
}
