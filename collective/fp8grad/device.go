package fp8grad

import (
	"errors"
	"fmt"
	"sync"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	pcuda "github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
	"github.com/distopt/distopt/internal/kernels"
)

// NewDevice wraps inner, a device communicator, with the GPU codec
// (internal/kernels/gradfp8.cu, bit for bit the CPU codec) on stream s:
// the stream on which the caller produces the gradients and consumes the
// shards. inner must order each group after the work queued on s before
// Start (collective/nccl: Config.Compute = s). Start queues the
// quantization on s before starting the inner group; Wait waits for the
// inner group, queues the sums on s and synchronizes it, so that the
// shards are there when Wait returns. The Comm loads the codec's kernels
// on s's device and owns inner: Close closes it, frees the scratch and
// residual memory and unloads the kernels.
func NewDevice(inner collective.Communicator, cfg Config, s *pcuda.Stream) (*Comm, error) {
	if inner == nil || s == nil {
		return nil, fmt.Errorf("fp8grad: nil communicator or stream: %w", ErrConfig)
	}
	if _, ok := inner.(crosser); ok {
		return nil, fmt.Errorf("fp8grad: a hierarchical communicator: wrap its group communicator instead: %w", ErrConfig)
	}
	if inner.Memory() != buffer.Device {
		return nil, fmt.Errorf("fp8grad: NewDevice of a %s communicator: %w", inner.Memory(), ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st := cudalink.Stream(s)
	ks, err := kernels.LoadModules(st.Device(), "gradfp8")
	if err != nil {
		return nil, fmt.Errorf("fp8grad: %w", err)
	}
	return &Comm{inner: inner, cfg: cfg, gpu: &gpuCodec{ks: ks, s: st, residuals: map[resKey]devResidual{}}}, nil
}

// gpuCodec holds the device state of a Comm: free scratch buffers by
// size, and the error feedback residuals.
type gpuCodec struct {
	ks *kernels.Set // the gradfp8 module, on s's device
	s  *cuda.Stream

	mu        sync.Mutex
	free      map[int][]cuda.DevicePtr
	residuals map[resKey]devResidual
	resBytes  int
}

// devResidual is a residual in device memory: elems float32.
type devResidual struct {
	p     cuda.DevicePtr
	elems int
}

// kernels returns the codec's kernels, or ErrClosed after close.
func (g *gpuCodec) kernels() (*kernels.Set, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ks == nil {
		return nil, collective.ErrClosed
	}
	return g.ks, nil
}

// scratch returns n bytes of device memory (a free buffer, or a new one).
func (g *gpuCodec) scratch(n int) (cuda.DevicePtr, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ks == nil {
		return 0, collective.ErrClosed
	}
	if l := g.free[n]; len(l) > 0 {
		p := l[len(l)-1]
		g.free[n] = l[:len(l)-1]
		return p, nil
	}
	return g.ks.Device().Alloc(n)
}

// release returns a scratch buffer of n bytes; the stream has been
// synchronized since its last use.
func (g *gpuCodec) release(p cuda.DevicePtr, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free == nil {
		g.free = map[int][]cuda.DevicePtr{}
	}
	g.free[n] = append(g.free[n], p)
}

// residual returns the residual of k (elems float32, zeroed on first
// use).
func (g *gpuCodec) residual(k resKey, elems int) (cuda.DevicePtr, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ks == nil {
		return 0, collective.ErrClosed
	}
	if r, ok := g.residuals[k]; ok {
		return r.p, k.checkLen(r.elems, elems)
	}
	p, err := g.ks.Device().Alloc(4 * elems)
	if err != nil {
		return 0, err
	}
	if err := g.s.Memset32(p, 0, elems); err != nil {
		return 0, errors.Join(err, g.ks.Device().Free(p))
	}
	g.residuals[k] = devResidual{p, elems}
	g.resBytes += 4 * elems
	return p, nil
}

// close waits for the stream, frees every buffer and unloads the
// kernels; a second call does nothing.
func (g *gpuCodec) close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ks == nil {
		return nil
	}
	d := g.ks.Device()
	errs := []error{g.s.Synchronize()}
	for _, l := range g.free {
		for _, p := range l {
			errs = append(errs, d.Free(p))
		}
	}
	for _, r := range g.residuals {
		errs = append(errs, d.Free(r.p))
	}
	errs = append(errs, g.ks.Close())
	g.free, g.residuals, g.ks = nil, nil, nil
	return errors.Join(errs...)
}

// elem is the kernels' element type of dt (BFloat16 or Float32).
func elem(dt buffer.DType) kernels.Elem {
	if dt == buffer.BFloat16 {
		return kernels.BF16
	}
	return kernels.F32
}

// encodeDevice queues the quantization of op's d pieces into a scratch
// send buffer and returns the reduction with its send and receive
// buffers.
func (c *Comm) encodeDevice(op collective.Op) (*reduction, error) {
	g, d := c.gpu, c.Size()
	n := op.Dst.Len() / op.DType.Size()
	pb := PieceBytes(n, c.cfg.Block)
	src := op.Src.(buffer.DeviceBuffer)
	r := &reduction{op: op, n: n, bytes: d * pb}
	var err error
	if r.sendDev, err = g.scratch(r.bytes); err != nil {
		return nil, err
	}
	if r.recvDev, err = g.scratch(r.bytes); err != nil {
		g.release(r.sendDev, r.bytes)
		return nil, err
	}
	var res cuda.DevicePtr
	if c.cfg.ErrorFeedback && n > 0 {
		if res, err = g.residual(keyOf(op, src.Ptr, src.Size), d*n); err != nil {
			return nil, c.dropDevice(r, err)
		}
	}
	ks, err := g.kernels()
	if err != nil {
		return nil, c.dropDevice(r, err)
	}
	if err := ks.GradQuantize(g.s, r.sendDev, cuda.DevicePtr(src.Ptr), res, n, d, c.cfg.Block, elem(op.DType), c.cfg.Format); err != nil {
		return nil, c.dropDevice(r, err)
	}
	dev := src.Device
	r.send = buffer.DeviceBuffer{Ptr: uintptr(r.sendDev), Size: r.bytes, Device: dev}
	r.recv = buffer.DeviceBuffer{Ptr: uintptr(r.recvDev), Size: r.bytes, Device: dev}
	return r, nil
}

// dropDevice synchronizes the stream, releases r's scratch and returns
// err (with the synchronization's error).
func (c *Comm) dropDevice(r *reduction, err error) error {
	err = errors.Join(err, c.gpu.s.Synchronize())
	c.gpu.release(r.sendDev, r.bytes)
	c.gpu.release(r.recvDev, r.bytes)
	return fmt.Errorf("fp8grad: %w", err)
}

// finishDevice queues the sums of the reductions into their Dst,
// synchronizes the stream and releases the scratch.
func (c *Comm) finishDevice(rs []*reduction) error {
	g, d := c.gpu, c.Size()
	ks, err := g.kernels()
	errs := []error{err}
	for _, r := range rs {
		if ks == nil {
			break
		}
		div := float32(1)
		if r.op.Reduce == collective.Avg {
			div = float32(d)
		}
		dst := cuda.DevicePtr(r.op.Dst.(buffer.DeviceBuffer).Ptr)
		errs = append(errs, ks.GradSum(g.s, dst, r.recvDev, r.n, d, c.cfg.Block, elem(r.op.DType), c.cfg.Format, div))
	}
	errs = append(errs, g.s.Synchronize())
	for _, r := range rs {
		g.release(r.sendDev, r.bytes)
		g.release(r.recvDev, r.bytes)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fp8grad: %w", err)
	}
	return nil
}

// dropAll synchronizes the stream and releases the scratch of reductions
// whose group was never started.
func (c *Comm) dropAll(rs []*reduction) error {
	err := c.gpu.s.Synchronize()
	for _, r := range rs {
		c.gpu.release(r.sendDev, r.bytes)
		c.gpu.release(r.recvDev, r.bytes)
	}
	return err
}
