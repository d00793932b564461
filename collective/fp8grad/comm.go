package fp8grad

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/cuda"
)

// Comm is a Communicator whose floating point Sum and Avg reduce-scatters
// travel in FP8 (see the package documentation). Every other op passes
// through to the communicator it wraps.
type Comm struct {
	inner collective.Communicator
	cfg   Config

	mu        sync.Mutex           // guards residuals
	residuals map[resKey][]float32 // error feedback, by tag or source buffer (host)
	gpu       *gpuCodec            // the device codec (NewDevice), or nil
}

// crosser is what a hierarchical communicator (collective/hier) has.
type crosser interface {
	Cross() collective.Communicator
}

// New wraps inner, a host communicator (NewDevice wraps a device one). A hierarchical communicator (collective/hier, recognized by
// its Cross method) is refused too: wrap its group communicator instead
// (hier.New(fp8grad.New(group), cross)), and the gradients travel in FP8
// within the groups and as they are across them. The Comm owns inner:
// Close closes it.
func New(inner collective.Communicator, cfg Config) (*Comm, error) {
	if inner == nil {
		return nil, fmt.Errorf("fp8grad: nil communicator: %w", ErrConfig)
	}
	if _, ok := inner.(crosser); ok {
		return nil, fmt.Errorf("fp8grad: a hierarchical communicator's reduce-scatter is not an all-to-all within its group: wrap its group communicator instead: %w", ErrConfig)
	}
	if inner.Memory() != buffer.Host {
		return nil, fmt.Errorf("fp8grad: New of a %s communicator (see NewDevice): %w", inner.Memory(), ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Comm{inner: inner, cfg: cfg, residuals: map[resKey][]float32{}}, nil
}

// Rank is the inner communicator's rank.
func (c *Comm) Rank() int { return c.inner.Rank() }

// Size is the inner communicator's size.
func (c *Comm) Size() int { return c.inner.Size() }

// Memory is the inner communicator's memory kind.
func (c *Comm) Memory() buffer.MemoryKind { return c.inner.Memory() }

// Close closes the inner communicator (and frees the device memory of a
// NewDevice Comm).
func (c *Comm) Close() error {
	err := c.inner.Close()
	if c.gpu != nil {
		err = errors.Join(err, c.gpu.close())
	}
	return err
}

// Config returns the configuration in use (defaults filled in).
func (c *Comm) Config() Config { return c.cfg }

// ResidualBytes is the memory the error feedback holds now: 4 bytes per
// element of every reduction (tag or source buffer) so far (0 without error
// feedback).
func (c *Comm) ResidualBytes() int {
	if c.gpu != nil {
		c.gpu.mu.Lock()
		defer c.gpu.mu.Unlock()
		return c.gpu.resBytes
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, r := range c.residuals {
		total += 4 * len(r)
	}
	return total
}

// Encoded reports whether op travels in FP8: a reduce-scatter of BFloat16
// or Float32 with Sum or Avg.
func Encoded(op collective.Op) bool {
	return op.Kind == collective.OpReduceScatter &&
		(op.DType == buffer.BFloat16 || op.DType == buffer.Float32) &&
		(op.Reduce == collective.Sum || op.Reduce == collective.Avg)
}

// Start validates ops, quantizes the pieces of every encoded
// reduce-scatter (on the calling goroutine), and starts one group on the
// inner communicator: the other ops as they are and one all-to-all per
// encoded reduce-scatter. Wait waits for it and dequantizes and sums the
// received pieces into each reduce-scatter's Dst.
func (c *Comm) Start(ops ...collective.Op) collective.Work {
	d := c.Size()
	for _, op := range ops {
		if err := op.Validate(d, c.Memory()); err != nil {
			return collective.DoneWork{Err: err}
		}
	}
	w := &work{c: c}
	inner := make([]collective.Op, 0, len(ops))
	for _, op := range ops {
		if !Encoded(op) || op.Dst.Len() == 0 {
			inner = append(inner, op)
			continue
		}
		var r *reduction
		if c.gpu != nil {
			var err error
			if r, err = c.encodeDevice(op); err != nil {
				return collective.DoneWork{Err: errors.Join(err, c.dropAll(w.reductions))}
			}
		} else {
			var err error
			if r, err = c.encode(op); err != nil {
				return collective.DoneWork{Err: err}
			}
		}
		w.reductions = append(w.reductions, r)
		inner = append(inner, collective.Op{Kind: collective.OpAllToAll, Dst: r.recv, Src: r.send})
	}
	w.inner = c.inner.Start(inner...)
	return w
}

// reduction is an encoded reduce-scatter in flight.
type reduction struct {
	op         collective.Op
	n          int           // elements of the shard
	send, recv buffer.Buffer // d wire pieces each
	// device scratch (NewDevice): the buffers of send and recv, of bytes each
	sendDev, recvDev cuda.DevicePtr
	bytes            int
}

// encode quantizes the d pieces of op's source.
func (c *Comm) encode(op collective.Op) (*reduction, error) {
	d := c.Size()
	n := op.Dst.Len() / op.DType.Size()
	hsrc := op.Src.(buffer.HostBuffer)
	res, err := c.residual(keyOf(op, uintptr(unsafe.Pointer(unsafe.SliceData(hsrc))), len(hsrc)), d*n)
	if err != nil {
		return nil, err
	}
	pb := PieceBytes(n, c.cfg.Block)
	send := make(buffer.HostBuffer, d*pb)
	r := &reduction{op: op, n: n, send: send, recv: make(buffer.HostBuffer, d*pb)}
	src := toFloat32(hsrc, op.DType)
	for p := range d {
		var rp []float32
		if res != nil {
			rp = res[p*n : (p+1)*n]
		}
		Quantize(send[p*pb:(p+1)*pb], src[p*n:(p+1)*n], rp, c.cfg.Block, c.cfg.Format)
	}
	return r, nil
}

// toFloat32 returns the elements of b (BFloat16 or Float32) as float32.
func toFloat32(b []byte, dt buffer.DType) []float32 {
	if dt == buffer.Float32 {
		return collective.FromBytes[float32](b)
	}
	h := collective.FromBytes[uint16](b)
	x := make([]float32, len(h))
	for i, v := range h {
		x[i] = bf16.ToFloat32(v)
	}
	return x
}

// work is a started group: the inner group, then the sums.
type work struct {
	c          *Comm
	inner      collective.Work
	reductions []*reduction

	once sync.Once
	err  error
}

// Wait waits for the inner group and writes the sums (once).
func (w *work) Wait(ctx context.Context) error {
	w.once.Do(func() {
		w.err = w.inner.Wait(ctx)
		if w.c.gpu != nil {
			if w.err == nil {
				w.err = w.c.finishDevice(w.reductions)
			}
			// After a failure the scratch may still be in use by the
			// aborted group: it is not reused (Close frees nothing of it).
			return
		}
		if w.err != nil {
			return
		}
		for _, r := range w.reductions {
			r.finish(w.c.Size(), w.c.cfg)
		}
	})
	return w.err
}

// finish sums the received pieces into the reduce-scatter's Dst.
func (r *reduction) finish(d int, cfg Config) {
	pb := PieceBytes(r.n, cfg.Block)
	recv := r.recv.(buffer.HostBuffer)
	pieces := make([][]byte, d)
	for s := range d {
		pieces[s] = recv[s*pb : (s+1)*pb]
	}
	sum := make([]float32, r.n)
	div := float32(1)
	if r.op.Reduce == collective.Avg {
		div = float32(d)
	}
	DequantSum(sum, pieces, cfg.Block, cfg.Format, div)
	dst := r.op.Dst.(buffer.HostBuffer)
	if r.op.DType == buffer.Float32 {
		copy(dst, collective.ToBytes(sum))
		return
	}
	h := make([]uint16, r.n)
	for i, x := range sum {
		h[i] = bf16.FromFloat32(x)
	}
	copy(dst, collective.ToBytes(h))
}

var _ collective.Communicator = (*Comm)(nil)
