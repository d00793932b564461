package gemm

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/internal/cublaslt"
	icuda "github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
	"github.com/distopt/distopt/internal/kernels"
)

// WorkspaceBytes is the cuBLASLt workspace an Engine allocates once (32
// MiB, what NVIDIA recommends for Hopper).
const WorkspaceBytes = 32 << 20

// Engine runs the products of linear layers on one stream of one device.
// It owns a cuBLASLt handle, a workspace, a cache of matmul plans and one
// scratch buffer that grows to the largest single product's need (one
// layer's transposed weight, say) and is reused: its peak never depends on
// the number of layers. An Engine must not be used from two goroutines at
// once.
type Engine struct {
	d  *icuda.Device
	s  *icuda.Stream
	k  *kernels.Set
	lt *cublaslt.Handle

	ws      icuda.DevicePtr
	aux     icuda.DevicePtr // 16 bytes: amax bits, scale
	scratch icuda.DevicePtr
	size    int             // bytes of scratch
	peak    int             // the largest scratch a product asked for
	act     icuda.DevicePtr // the linear layers' transient operands (see Linear)
	actSize int             // bytes of act
	plans   map[cublaslt.Spec]*cublaslt.Plan
	tune    int                    // candidates timed per new plan (SetAutotune)
	tuned   map[cublaslt.Spec]bool // plans whose candidates were timed
	trace   func(Stage)            // SetTrace's hook, or nil
}

// New starts an engine on d whose work is queued on s. Without a GPU or
// without cuBLASLt 12.9+ (the first with Hopper's block-scaled FP8 kernels)
// it returns an error matching ErrUnavailable that names what is missing.
func New(d *cuda.Device, s *cuda.Stream) (*Engine, error) {
	return newOn(cudalink.Device(d), cudalink.Stream(s))
}

func newOn(d *icuda.Device, s *icuda.Stream) (*Engine, error) {
	lib, err := cublaslt.Default()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if !lib.BlockScaling() {
		return nil, fmt.Errorf("%w: %v, block-scaled FP8 needs cuBLASLt 12.9 or later", ErrUnavailable, lib)
	}
	if !d.Info().AtLeast(8, 9) {
		return nil, fmt.Errorf("%w: %s (sm_%d%d) has no FP8 tensor cores", ErrUnavailable, d.Info().Name, d.Info().Major, d.Info().Minor)
	}
	e := &Engine{d: d, s: s, plans: map[cublaslt.Spec]*cublaslt.Plan{}, tuned: map[cublaslt.Spec]bool{}}
	if e.k, err = kernels.Load(d); err != nil {
		return nil, err
	}
	if e.lt, err = lib.NewHandle(d); err != nil {
		e.Close()
		return nil, err
	}
	if e.ws, err = d.Alloc(WorkspaceBytes); err != nil {
		e.Close()
		return nil, err
	}
	if e.aux, err = d.Alloc(256); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Library describes the cuBLASLt in use, e.g. "cuBLASLt 13.1.0
// (libcublasLt.so.13)".
func (e *Engine) Library() string { return e.lt.Library().String() }

// Stream returns the stream the engine queues on.
func (e *Engine) Stream() *cuda.Stream { return cudalink.PublicStream(e.s) }

// device returns the public handle of the engine's device.
func (e *Engine) device() *cuda.Device { return cudalink.PublicDevice(e.d) }

// ScratchBytes returns the bytes of scratch the engine holds now (the
// largest single product's need so far), and PeakScratch the largest any
// product asked for; both exclude the fixed WorkspaceBytes.
func (e *Engine) ScratchBytes() int { return e.size }

// PeakScratch returns the largest scratch any product asked for.
func (e *Engine) PeakScratch() int { return e.peak }

// Close waits for the stream and releases everything the engine holds.
func (e *Engine) Close() error {
	errs := []error{e.s.Synchronize()}
	for _, p := range e.plans {
		errs = append(errs, p.Destroy())
	}
	e.plans = nil
	for _, p := range []*icuda.DevicePtr{&e.ws, &e.aux, &e.scratch, &e.act} {
		if *p != 0 {
			errs = append(errs, e.d.Free(*p))
			*p = 0
		}
	}
	if e.lt != nil {
		errs = append(errs, e.lt.Destroy())
		e.lt = nil
	}
	if e.k != nil {
		errs = append(errs, e.k.Close())
		e.k = nil
	}
	return errors.Join(errs...)
}

// reserve makes the scratch buffer at least n bytes.
func (e *Engine) reserve(n int) error {
	e.peak = max(e.peak, n)
	return e.grow(&e.scratch, &e.size, n)
}

// ActivationScratch returns the bytes of the buffer the engine's Linear
// layers make their transient operands in (quantized output gradients,
// re-made transposed activations): like the scratch, it grows to the
// largest single call's need and is shared by every layer.
func (e *Engine) ActivationScratch() int { return e.actSize }

// grow makes the buffer *buf of *size bytes at least n bytes. Growing
// waits for the stream (earlier work may still read the old buffer) and
// reallocates.
func (e *Engine) grow(buf *icuda.DevicePtr, size *int, n int) error {
	if n <= *size {
		return nil
	}
	if *buf != 0 {
		if err := e.s.Synchronize(); err != nil {
			return err
		}
		if err := e.d.Free(*buf); err != nil {
			return err
		}
		*buf, *size = 0, 0
	}
	p, err := e.d.Alloc(n)
	if err != nil {
		return err
	}
	*buf, *size = p, n
	return nil
}

// arena hands out aligned pieces of the scratch buffer for one product.
type arena struct {
	base icuda.DevicePtr
	off  int
}

// align is the alignment of every piece (cuBLASLt wants 16 bytes; 256
// keeps pieces on their own cache lines).
const align = 256

func alignUp(n int) int { return (n + align - 1) / align * align }

func (a *arena) take(n int) icuda.DevicePtr {
	p := a.base.Add(a.off)
	a.off += alignUp(n)
	return p
}

// plan returns the cached plan of spec, creating it on first use.
func (e *Engine) plan(spec cublaslt.Spec) (*cublaslt.Plan, error) {
	if p, ok := e.plans[spec]; ok {
		return p, nil
	}
	p, err := e.lt.NewPlan(spec, WorkspaceBytes, e.aux, e.tune)
	if err != nil {
		return nil, err
	}
	e.plans[spec] = p
	return p, nil
}

func outType(t buffer.DType) (cublaslt.DataType, error) {
	switch t {
	case buffer.BFloat16:
		return cublaslt.R16BF, nil
	case buffer.Float32:
		return cublaslt.R32F, nil
	}
	return 0, fmt.Errorf("%w: output type %v, want BFloat16 or Float32", ErrLayout, t)
}
