//go:build gorgonia

package cuinterop

import "errors"

var (
	// ErrHostMemory is returned for a buffer in host memory (the CPU
	// backend's): it has no device address.
	ErrHostMemory = errors.New("cuinterop: buffer is in host memory, not on a GPU")
	// ErrBufferType is returned for a device buffer of a type other than
	// buffer.DeviceBuffer.
	ErrBufferType = errors.New("cuinterop: unsupported buffer type")
	// ErrNoScale is returned by ScaleInvPtr for a high-precision parameter,
	// which has no scale_inv.
	ErrNoScale = errors.New("cuinterop: parameter has no scale_inv (high precision)")
)
