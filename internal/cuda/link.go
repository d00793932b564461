package cuda

// Public converts between this package's handles and those of the public
// package github.com/distopt/distopt/cuda, which sets the functions in its
// init. Package internal/cudalink gives them their types.
var Public struct {
	Device     func(pub any) *Device // the device behind a public *cuda.Device
	Stream     func(pub any) *Stream // the stream behind a public *cuda.Stream
	WrapDevice func(d *Device) any   // the public *cuda.Device of d
	WrapStream func(s *Stream) any   // the public *cuda.Stream of s
	Event      func(pub any) *Event  // the event behind a public *cuda.Event
	HostBuffer func(pub any) *HostBuffer
}
