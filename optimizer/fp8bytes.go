package optimizer

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// This file gives the gathered FP8 bytes of a parameter directly, without
// a type assertion on ParamView.Data or the copy Tensor makes. The bytes
// are the optimizer's own memory: read them, never write them, and only
// until the next Step, StepAsync or checkpoint load rewrites them. Their
// scales are ParamView.ScaleInv (Param), or Tensor's copy.

// FP8HostBytes returns the gathered FP8 bytes of the named parameter when
// the backend keeps them in host memory (the CPU backend): the
// parameter's elements row-major, one byte each, not copied. A GPU
// backend's bytes are collective.ErrMemoryKind (use FP8DeviceBytes), a
// high-precision parameter ErrConfig, an unknown name ErrUnknownParam.
func (o *Optimizer) FP8HostBytes(name string) ([]byte, error) {
	data, err := o.fp8Data(name)
	if err != nil {
		return nil, err
	}
	b, ok := data.(buffer.HostBuffer)
	if !ok {
		return nil, fmt.Errorf("optimizer: FP8 bytes of %q are in %s memory; use FP8DeviceBytes: %w", name, data.Memory(), collective.ErrMemoryKind)
	}
	return b, nil
}

// FP8DeviceBytes returns where the gathered FP8 bytes of the named
// parameter lie on the GPU (a GPU backend): a pointer, size and device for
// a kernel or a framework's tensor to read, not copied. Host bytes are
// collective.ErrMemoryKind (use FP8HostBytes); the other errors are
// FP8HostBytes'.
func (o *Optimizer) FP8DeviceBytes(name string) (buffer.DeviceBuffer, error) {
	data, err := o.fp8Data(name)
	if err != nil {
		return buffer.DeviceBuffer{}, err
	}
	b, ok := data.(buffer.DeviceBuffer)
	if !ok {
		return buffer.DeviceBuffer{}, fmt.Errorf("optimizer: FP8 bytes of %q are in %s memory; use FP8HostBytes: %w", name, data.Memory(), collective.ErrMemoryKind)
	}
	return b, nil
}

// fp8Data is the gathered data of the named FP8 parameter.
func (o *Optimizer) fp8Data(name string) (buffer.Buffer, error) {
	v, err := o.Param(name)
	if err != nil {
		return nil, err
	}
	if v.HighPrecision {
		return nil, fmt.Errorf("optimizer: %q is gathered in %s, not FP8: %w", name, v.DType, ErrConfig)
	}
	return v.Data, nil
}
