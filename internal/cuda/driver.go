package cuda

import (
	"fmt"
	"sync"
)

// LibraryName is the name under which Init opens the driver library.
const LibraryName = "libcuda.so.1"

var driver struct {
	once sync.Once
	err  error
}

// Init opens the driver library and initializes the driver, once per
// process; later calls return the first call's result. It returns an error
// matching ErrNoDriver when the library is missing (or is the toolkit's stub
// library), and one matching ErrNoDevice when cuInit fails otherwise (no GPU
// visible, driver and kernel module out of step, ...); the wrapped *Error
// keeps the driver's code.
func Init() error {
	driver.once.Do(func() { driver.err = initDriver() })
	return driver.err
}

func initDriver() error {
	if err := openDriver(LibraryName); err != nil {
		return err
	}
	r := cuInit()
	switch r {
	case Success:
		return nil
	case ErrorStubLibrary:
		return fmt.Errorf("%w: %w", ErrNoDriver, check("cuInit", r))
	case ErrorNoDevice:
		return check("cuInit", r) // matches ErrNoDevice itself
	}
	return fmt.Errorf("%w: %w", ErrNoDevice, check("cuInit", r))
}

// DriverVersion returns the CUDA version the driver supports, as
// 1000*major + 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	v, r := cuDriverGetVersion()
	return v, check("cuDriverGetVersion", r)
}

// DeviceCount returns the number of GPUs the driver sees. A host whose
// driver sees none returns 0 and an error matching ErrNoDevice.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	n, r := cuDeviceGetCount()
	if err := check("cuDeviceGetCount", r); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: the driver reports 0 devices", ErrNoDevice)
	}
	return n, nil
}

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Ordinal  int    // index among the devices the driver sees (CUDA_VISIBLE_DEVICES applies)
	Name     string // e.g. "NVIDIA H200"
	PCIBusID string // e.g. "0000:1B:00.0", as NVML also names it

	Major, Minor int    // compute capability
	TotalMemory  uint64 // bytes of device memory

	Multiprocessors             int
	MaxThreadsPerBlock          int
	MaxThreadsPerMultiprocessor int
	MaxSharedMemoryPerBlock     int // bytes a block may opt in to (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
	L2CacheBytes                int
	MemoryClockKHz              int // peak memory clock
	MemoryBusWidth              int // bits
}

// AtLeast reports whether the compute capability is major.minor or newer.
func (i DeviceInfo) AtLeast(major, minor int) bool {
	return i.Major > major || i.Major == major && i.Minor >= minor
}

func (i DeviceInfo) String() string {
	return fmt.Sprintf("%d: %s (sm_%d%d, %d SMs, %.1f GiB, %s)", i.Ordinal, i.Name, i.Major, i.Minor,
		i.Multiprocessors, float64(i.TotalMemory)/(1<<30), i.PCIBusID)
}

// deviceAttribute is a CUdevice_attribute.
type deviceAttribute int

const (
	attrMaxThreadsPerBlock           deviceAttribute = 1
	attrMultiprocessorCount          deviceAttribute = 16
	attrMemoryClockRate              deviceAttribute = 36
	attrGlobalMemoryBusWidth         deviceAttribute = 37
	attrL2CacheSize                  deviceAttribute = 38
	attrMaxThreadsPerMultiprocessor  deviceAttribute = 39
	attrComputeCapabilityMajor       deviceAttribute = 75
	attrComputeCapabilityMinor       deviceAttribute = 76
	attrMaxSharedMemoryPerBlockOptin deviceAttribute = 97
)

// Devices describes every GPU the driver sees.
func Devices() ([]DeviceInfo, error) {
	n, err := DeviceCount()
	if err != nil {
		return nil, err
	}
	infos := make([]DeviceInfo, n)
	for i := range infos {
		if infos[i], err = deviceInfo(i); err != nil {
			return nil, err
		}
	}
	return infos, nil
}

// deviceInfo queries device ordinal; the driver must be initialized. These
// queries need no context.
func deviceInfo(ordinal int) (DeviceInfo, error) {
	info := DeviceInfo{Ordinal: ordinal}
	dev, r := cuDeviceGet(ordinal)
	if err := check("cuDeviceGet", r); err != nil {
		return info, err
	}
	if info.Name, r = cuDeviceGetName(dev); r != Success {
		return info, check("cuDeviceGetName", r)
	}
	if info.PCIBusID, r = cuDeviceGetPCIBusID(dev); r != Success {
		return info, check("cuDeviceGetPCIBusId", r)
	}
	if info.TotalMemory, r = cuDeviceTotalMem(dev); r != Success {
		return info, check("cuDeviceTotalMem", r)
	}
	attrs := []struct {
		attr deviceAttribute
		dst  *int
	}{
		{attrComputeCapabilityMajor, &info.Major},
		{attrComputeCapabilityMinor, &info.Minor},
		{attrMultiprocessorCount, &info.Multiprocessors},
		{attrMaxThreadsPerBlock, &info.MaxThreadsPerBlock},
		{attrMaxThreadsPerMultiprocessor, &info.MaxThreadsPerMultiprocessor},
		{attrMaxSharedMemoryPerBlockOptin, &info.MaxSharedMemoryPerBlock},
		{attrL2CacheSize, &info.L2CacheBytes},
		{attrMemoryClockRate, &info.MemoryClockKHz},
		{attrGlobalMemoryBusWidth, &info.MemoryBusWidth},
	}
	for _, a := range attrs {
		if *a.dst, r = cuDeviceGetAttribute(a.attr, dev); r != Success {
			return info, check(fmt.Sprintf("cuDeviceGetAttribute(%d)", a.attr), r)
		}
	}
	return info, nil
}
