//go:build cgo && linux

package gomlxinterop

import (
	"fmt"
	"unsafe"

	"github.com/gomlx/go-xla/pkg/pjrt"
	xladtypes "github.com/gomlx/go-xla/pkg/types/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
)

// viewAlign is the alignment XLA assumes of its entry parameters; distopt
// buffers aligned to it are read in place, others through a copy.
const viewAlign = 16

// devicePointer returns the device address a as the pointer PJRT takes.
func devicePointer(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

// view returns a tensor of the GoMLX backend whose buffer is a PJRT view of
// the device memory at addr (owned by distopt; the view never frees it).
func (d *gpuDevice) view(addr uintptr, dt dtypes.DType, dims []int) (*tensors.Tensor, error) {
	dev := d.client.AddressableDevices()[d.dev]
	buf, err := d.client.CreateViewOfDeviceBuffer(devicePointer(addr), xladtypes.DType(dt), dims, dev)
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: PJRT view of device memory: %w", err)
	}
	out, err := tensors.FromBuffer(d.xb, buf)
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: tensor of a PJRT view: %w", err)
	}
	return out, nil
}

// placeholders gives every parameter's variable a value that views one
// device buffer as large as the largest variable (the graph feeds but
// never reads them) and releases the values XLA initialised.
func (d *gpuDevice) placeholders(params []Param) error {
	most := 0
	for _, p := range params {
		most = max(most, 4*p.Var.Shape().Size())
	}
	var err error
	if d.holder, err = d.be.Alloc(most); err != nil {
		return err
	}
	addr := d.holder.(buffer.DeviceBuffer).Ptr
	for _, p := range params {
		v, err := d.view(addr, dtypes.Float32, p.Var.Shape().Dimensions)
		if err == nil {
			err = p.Var.SetValue(v)
		}
		if err != nil {
			return fmt.Errorf("gomlxinterop: placeholder of %q: %w", p.Name, err)
		}
	}
	return nil
}

// input returns the graph input reading buf: a view when buf is aligned as
// XLA expects, else a buffer of XLA's that refresh copies buf into.
func (d *gpuDevice) input(buf buffer.Buffer, dt dtypes.DType, dims []int) (*tensors.Tensor, bool, error) {
	src, ok := buf.(buffer.DeviceBuffer)
	if !ok {
		return nil, false, fmt.Errorf("%w: distopt's buffer is %T, not device memory", ErrHandOver, buf)
	}
	if src.Ptr%viewAlign == 0 {
		v, err := d.view(src.Ptr, dt, dims)
		return v, true, err
	}
	own := tensors.FromShape(shapes.Make(dt, dims...))
	if err := own.MaterializeOnDevice(d.xb, false, d.dev); err != nil {
		return nil, false, err
	}
	addr, err := d.address(own)
	if err != nil {
		return nil, false, err
	}
	d.copies = append(d.copies, deviceCopy{dst: addr, src: src})
	return own, false, nil
}

// address returns the device address of tensor x's PJRT buffer.
func (d *gpuDevice) address(x *tensors.Tensor) (uintptr, error) {
	b, err := x.Buffer(d.xb, d.dev)
	if err != nil {
		return 0, err
	}
	pb, ok := b.(*pjrt.Buffer)
	if !ok {
		return 0, fmt.Errorf("%w: buffer %T is not PJRT's", ErrHandOver, b)
	}
	p, err := pb.UnsafePointer()
	if err != nil {
		return 0, fmt.Errorf("gomlxinterop: device address of a PJRT buffer: %w", err)
	}
	return uintptr(p), nil
}

// refresh copies the weight inputs that are not views, on distopt's
// stream, and waits for the stream: after it the next execution reads
// the weights of the last step.
func (d *gpuDevice) refresh() error {
	s := d.be.Stream()
	for _, c := range d.copies {
		if err := s.CopyDtoD(cuda.DevicePtr(c.dst), cuda.DevicePtr(c.src.Ptr), c.src.Size); err != nil {
			return err
		}
	}
	return d.be.Sync()
}

// sync synchronises the primary context: every stream, XLA's too.
func (d *gpuDevice) sync() error { return d.be.Device().Synchronize() }

// copyGrads queues the copy of every gradient into its view, all in one
// hand-over to distopt's device thread.
func (d *gpuDevice) copyGrads(dst []buffer.Buffer, grads []*tensors.Tensor) error {
	type copyOp struct {
		dst, src cuda.DevicePtr
		n        int
	}
	ops := make([]copyOp, len(dst))
	for i, b := range dst {
		to, ok := b.(buffer.DeviceBuffer)
		if !ok {
			return fmt.Errorf("%w: gradient view %d is %T, not device memory", ErrHandOver, i, b)
		}
		src, err := d.address(grads[i])
		if err != nil {
			return err
		}
		ops[i] = copyOp{cuda.DevicePtr(to.Ptr), cuda.DevicePtr(src), to.Size}
	}
	s := d.be.Stream()
	return d.be.Batch(func() error {
		for _, c := range ops {
			if err := s.CopyDtoD(c.dst, c.src, c.n); err != nil {
				return err
			}
		}
		return nil
	})
}

// close frees the placeholders' memory, once.
func (d *gpuDevice) close() error {
	if d.holder == nil {
		return nil
	}
	d.be.Free(d.holder)
	d.holder = nil
	return nil
}

// lend returns the device memory of every gradient output, for the step to
// read in place (optimizer.BindGrads). The outputs stay XLA's: Update
// finalises them once distopt's stream has passed the step.
func (d *gpuDevice) lend(grads []*tensors.Tensor) ([]buffer.Buffer, error) {
	out := make([]buffer.Buffer, len(grads))
	for i, g := range grads {
		addr, err := d.address(g)
		if err != nil {
			return nil, err
		}
		out[i] = buffer.DeviceBuffer{Ptr: addr, Size: int(g.Shape().Memory()), Device: d.be.Ordinal()}
	}
	return out, nil
}
