package cuda

// Usage counts what a Device has handed out and not yet released, through
// this package and through the libraries that take the Device (the
// optimizer's GPU backend, gemm): for leak checks, and for memory reports
// that NVML cannot split by owner.
type Usage struct {
	DeviceBytes, DeviceAllocs int // device memory
	HostBytes, HostAllocs     int // pinned host memory
	Streams, Events, Modules  int
}

// Usage returns what is allocated and not yet freed through the Device.
func (d *Device) Usage() Usage {
	u := d.d.Usage()
	return Usage{DeviceBytes: u.DeviceBytes, DeviceAllocs: u.DeviceAllocs, HostBytes: u.HostBytes,
		HostAllocs: u.HostAllocs, Streams: u.Streams, Events: u.Events, Modules: u.Modules}
}

// HostSyncs returns how many times the host has waited for the device's
// work since Open: the Synchronize calls of the device, its streams and
// events, and the synchronous copies (Upload, Download). Queries that do
// not wait are not counted.
func (d *Device) HostSyncs() int64 { return d.d.HostSyncs() }
