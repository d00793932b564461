//go:build gorgonia

package cuinterop

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
	"gorgonia.org/cu"
)

// FromDevicePtr wraps bytes bytes of device memory at p on GPU dev
// (allocated through gorgonia, in the primary context of dev: see the
// package doc) as a buffer that distopt's GPU backend and communicators
// accept. Device is int(dev), the ordinal. The caller keeps ownership: the
// memory must outlive every use by distopt and is never freed by it. A
// negative size panics.
func FromDevicePtr(p cu.DevicePtr, bytes int, dev cu.Device) buffer.DeviceBuffer {
	if bytes < 0 {
		panic(fmt.Sprintf("cuinterop: FromDevicePtr of %d bytes", bytes))
	}
	return buffer.DeviceBuffer{Ptr: uintptr(p), Size: bytes, Device: int(dev)}
}

// DevicePtr returns the device address of b, a buffer.DeviceBuffer (as
// the GPU backend hands out); an empty buffer may have address 0. A buffer
// in host memory gives ErrHostMemory, a nil b or any other type
// ErrBufferType.
func DevicePtr(b buffer.Buffer) (cu.DevicePtr, error) {
	d, err := deviceBuffer(b)
	return cu.DevicePtr(d.Ptr), err
}

// Device returns the GPU that b lives on, with DevicePtr's errors.
func Device(b buffer.Buffer) (cu.Device, error) {
	d, err := deviceBuffer(b)
	return cu.Device(d.Device), err
}

func deviceBuffer(b buffer.Buffer) (buffer.DeviceBuffer, error) {
	if d, ok := b.(buffer.DeviceBuffer); ok {
		return d, nil
	}
	if b != nil && b.Memory() == buffer.Host {
		return buffer.DeviceBuffer{}, fmt.Errorf("%w (%T)", ErrHostMemory, b)
	}
	return buffer.DeviceBuffer{}, fmt.Errorf("%w: %T", ErrBufferType, b)
}

// GradPtr returns the device address and size in bytes of a gradient view:
// v.Len() elements of v.DType (float32 or bfloat16, little-endian), which
// the program writes before Step (see the package doc on ordering).
func GradPtr(v optimizer.GradView) (p cu.DevicePtr, bytes int64, err error) {
	return viewPtr(v.Data, v.Name)
}

// ParamPtr returns the device address and size in bytes of a parameter
// view's data: one FP8 byte per element (v.Format, scaled as v.Recipe says)
// or the high-precision copy in v.DType. It holds the values of the last
// step until the next Step; read it, never write it.
func ParamPtr(v optimizer.ParamView) (p cu.DevicePtr, bytes int64, err error) {
	return viewPtr(v.Data, v.Name)
}

// ScaleInvPtr returns the device address and size in bytes of an FP8
// parameter view's scale_inv: float32 values (one per tensor, block or
// tile, in the recipe's order) or, for MXFP8, E8M0 bytes. A high-precision
// parameter gives ErrNoScale.
func ScaleInvPtr(v optimizer.ParamView) (p cu.DevicePtr, bytes int64, err error) {
	if v.HighPrecision || v.ScaleInv == nil {
		return 0, 0, fmt.Errorf("%w: %q", ErrNoScale, v.Name)
	}
	return viewPtr(v.ScaleInv, v.Name)
}

func viewPtr(b buffer.Buffer, name string) (cu.DevicePtr, int64, error) {
	p, err := DevicePtr(b)
	if err != nil {
		return 0, 0, fmt.Errorf("cuinterop: view of %q: %w", name, err)
	}
	return p, int64(b.Len()), nil
}
