//go:build cgo && linux

package gomlxinterop

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/gomlx/go-xla/pkg/pjrt"
	xladtypes "github.com/gomlx/go-xla/pkg/types/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// viewAlign is the alignment XLA assumes of its entry parameters; distopt
// buffers aligned to it are read in place, others through a copy.
const viewAlign = 16

// devicePointer returns the device address a as the pointer PJRT takes.
func devicePointer(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

// view returns a tensor of the GoMLX backend whose buffer is a PJRT view of
// the device memory at addr (owned by distopt; the view never frees it).
func (t *GPUTrainer) view(addr uintptr, dt dtypes.DType, dims []int) (*tensors.Tensor, error) {
	dev := t.client.AddressableDevices()[t.dev]
	buf, err := t.client.CreateViewOfDeviceBuffer(devicePointer(addr), xladtypes.DType(dt), dims, dev)
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: PJRT view of device memory: %w", err)
	}
	out, err := tensors.FromBuffer(t.xb, buf)
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: tensor of a PJRT view: %w", err)
	}
	return out, nil
}

// placeholders gives every parameter's variable a value that views one
// device buffer as large as the largest variable (the graph feeds but
// never reads them) and releases the values XLA initialised.
func (t *GPUTrainer) placeholders() error {
	most := 0
	for _, p := range t.params {
		most = max(most, 4*p.Var.Shape().Size())
	}
	var err error
	if t.holder, err = t.be.Alloc(most); err != nil {
		return err
	}
	addr := t.holder.(buffer.DeviceBuffer).Ptr
	for _, p := range t.params {
		v, err := t.view(addr, dtypes.Float32, p.Var.Shape().Dimensions)
		if err == nil {
			err = p.Var.SetValue(v)
		}
		if err != nil {
			return fmt.Errorf("gomlxinterop: placeholder of %q: %w", p.Name, err)
		}
	}
	return nil
}

// bind makes the graph's weight inputs from the parameters' gathered
// buffers and returns the parameter views.
func (t *GPUTrainer) bind() ([]optimizer.ParamView, error) {
	var views []optimizer.ParamView
	for _, p := range t.params {
		v, err := t.opt.Param(p.Name)
		if err != nil {
			return nil, err
		}
		views = append(views, v)
		for _, in := range weightBuffers(v) {
			w, err := t.input(in.buf, in.dt, in.dims)
			if err != nil {
				return nil, fmt.Errorf("gomlxinterop: weights of %q: %w", p.Name, err)
			}
			t.weights = append(t.weights, w)
		}
	}
	return views, nil
}

type weightBuffer struct {
	buf  buffer.Buffer
	dt   dtypes.DType
	dims []int
}

// weightBuffers lists the buffers of view v the graph reads, in the order
// of WeightGradExec's inputs.
func weightBuffers(v optimizer.ParamView) []weightBuffer {
	if v.HighPrecision {
		dt := dtypes.Float32
		if v.DType == buffer.BFloat16 {
			dt = dtypes.BFloat16
		}
		return []weightBuffer{{v.Data, dt, v.Shape}}
	}
	sdt, n := dtypes.Float32, v.ScaleInv.Len()/4
	if v.Recipe.Scaling == fp8.MXFP8 {
		sdt, n = dtypes.Uint8, v.ScaleInv.Len()
	}
	return []weightBuffer{{v.Data, dtypes.Uint8, v.Shape}, {v.ScaleInv, sdt, []int{n}}}
}

// input returns the graph input reading buf: a view when buf is aligned as
// XLA expects, else a buffer of XLA's that refresh copies buf into.
func (t *GPUTrainer) input(buf buffer.Buffer, dt dtypes.DType, dims []int) (weightInput, error) {
	src, ok := buf.(buffer.DeviceBuffer)
	if !ok {
		return weightInput{}, fmt.Errorf("%w: distopt's buffer is %T, not device memory", ErrHandOver, buf)
	}
	if src.Ptr%viewAlign == 0 {
		v, err := t.view(src.Ptr, dt, dims)
		t.timing.Views++
		return weightInput{src: src, t: v}, err
	}
	own := tensors.FromShape(shapes.Make(dt, dims...))
	if err := own.MaterializeOnDevice(t.xb, false, t.dev); err != nil {
		return weightInput{}, err
	}
	addr, err := t.address(own)
	t.timing.Copies++
	return weightInput{src: src, t: own, copyTo: addr}, err
}

// address returns the device address of tensor x's PJRT buffer.
func (t *GPUTrainer) address(x *tensors.Tensor) (uintptr, error) {
	b, err := x.Buffer(t.xb, t.dev)
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
func (t *GPUTrainer) refresh() error {
	s := t.be.Stream()
	for _, w := range t.weights {
		if w.copyTo != 0 {
			if err := s.CopyDtoD(cuda.DevicePtr(w.copyTo), cuda.DevicePtr(w.src.Ptr), w.src.Size); err != nil {
				return err
			}
		}
	}
	return t.be.Sync()
}

// Forward runs forward and backward on one batch and copies the gradients
// into distopt's gradient views (device to device, on distopt's stream).
// It returns the loss. Update must follow before the next Forward.
func (t *GPUTrainer) Forward(b Batch) (float32, error) {
	if t.grads != nil {
		return 0, fmt.Errorf("%w: Forward called twice without Update", ErrHandOver)
	}
	start := time.Now()
	ws := make([]*tensors.Tensor, len(t.weights))
	for i, w := range t.weights {
		ws[i] = w.t
	}
	loss, grads, err := t.exec.Exec(b.Inputs, b.Labels, ws)
	if err != nil {
		return 0, err
	}
	t.grads = grads
	l := tensors.ToScalar[float32](loss) // waits for the execution
	loss.FinalizeAll()
	synced := time.Now()
	err = t.be.Device().Synchronize() // every stream of the context, XLA's too
	copied := time.Now()
	if err == nil {
		err = t.copyGrads()
	}
	t.timing.Compute += synced.Sub(start)
	t.timing.Sync += copied.Sub(synced)
	t.timing.Copy += time.Since(copied)
	return l, err
}

// copyGrads queues the copy of every gradient into its view, all in one
// hand-over to distopt's device thread.
func (t *GPUTrainer) copyGrads() error {
	type copyOp struct {
		dst, src cuda.DevicePtr
		n        int
	}
	ops := make([]copyOp, len(t.params))
	for i, p := range t.params {
		v, err := t.opt.Grad(p.Name)
		if err != nil {
			return err
		}
		g := t.grads[i]
		n := g.Shape().Memory()
		dst, ok := v.Data.(buffer.DeviceBuffer)
		if !ok || int(n) != dst.Size {
			return fmt.Errorf("%w: gradient of %q is %s (%d bytes), distopt's view holds %d bytes of %v", ErrHandOver, p.Name, g.Shape(), n, v.Data.Len(), v.DType)
		}
		src, err := t.address(g)
		if err != nil {
			return err
		}
		ops[i] = copyOp{cuda.DevicePtr(dst.Ptr), cuda.DevicePtr(src), dst.Size}
	}
	s := t.be.Stream()
	return t.be.Batch(func() error {
		for _, c := range ops {
			if err := s.CopyDtoD(c.dst, c.src, c.n); err != nil {
				return err
			}
		}
		return nil
	})
}

// Update runs distopt's step (collective: all ranks together) on the
// gradients of the last Forward, waits for its gathers and stream, and
// releases the gradients.
func (t *GPUTrainer) Update(ctx context.Context) (optimizer.StepResult, error) {
	if t.grads == nil {
		return optimizer.StepResult{}, fmt.Errorf("%w: Update without Forward", ErrHandOver)
	}
	start := time.Now()
	res, err := t.opt.Step(ctx)
	if err == nil {
		err = t.opt.WaitGathers(ctx)
	}
	if err == nil {
		err = t.refresh()
	}
	for _, g := range t.grads {
		g.FinalizeAll() // the copies have completed: the stream was waited for
	}
	t.grads = nil
	t.timing.Update += time.Since(start)
	t.timing.Steps++
	return res, err
}

// Eval returns the loss of the model on batch b with the current weights
// (the gradients computed alongside are dropped, the optimizer is not
// touched). Not between Forward and Update.
func (t *GPUTrainer) Eval(b Batch) (float32, error) {
	if t.grads != nil {
		return 0, fmt.Errorf("%w: Eval between Forward and Update", ErrHandOver)
	}
	loss, grads, err := t.exec.Exec(b.Inputs, b.Labels, t.Weights())
	if err != nil {
		return 0, err
	}
	l := tensors.ToScalar[float32](loss)
	loss.FinalizeAll()
	for _, g := range grads {
		g.FinalizeAll()
	}
	return l, nil
}

// Step is Forward and Update: one training step on this rank's batch.
func (t *GPUTrainer) Step(ctx context.Context, b Batch) (float32, optimizer.StepResult, error) {
	l, err := t.Forward(b)
	if err != nil {
		return 0, optimizer.StepResult{}, err
	}
	res, err := t.Update(ctx)
	return l, res, err
}

// Grads returns the gradients of the last Forward (XLA's outputs, in
// distopt's layout and gradient type); valid until Update.
func (t *GPUTrainer) Grads() []*tensors.Tensor { return t.grads }

// Timing returns the accumulated timings.
func (t *GPUTrainer) Timing() Timing { return t.timing }

// Params returns the parameters, in gradient order.
func (t *GPUTrainer) Params() []Param { return t.params }

// Optimizer returns the rank's optimizer.
func (t *GPUTrainer) Optimizer() *optimizer.Optimizer { return t.opt }

// WeightGradExec returns the graph's executor.
func (t *GPUTrainer) WeightGradExec() *WeightGradExec { return t.exec }

// Weights returns the graph's weight inputs, in WeightGradExec's order
// (views of distopt's buffers, or XLA's copies of them).
func (t *GPUTrainer) Weights() []*tensors.Tensor {
	out := make([]*tensors.Tensor, len(t.weights))
	for i, w := range t.weights {
		out[i] = w.t
	}
	return out
}

// Close releases the views, the placeholders' memory and the optimizer.
func (t *GPUTrainer) Close() error {
	var errs []error
	for _, g := range t.grads {
		errs = append(errs, g.FinalizeAll())
	}
	for _, w := range t.weights {
		errs = append(errs, w.t.FinalizeAll())
	}
	for _, p := range t.params {
		if p.Var.HasValue() {
			errs = append(errs, p.Var.Reset())
		}
	}
	if t.exec != nil {
		t.exec.Finalize()
	}
	errs = append(errs, t.opt.Close())
	if t.holder != nil {
		t.be.Free(t.holder)
	}
	return errors.Join(errs...)
}
