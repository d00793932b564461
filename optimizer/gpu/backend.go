package gpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	pcuda "github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer/backend"
)

// Backend is the CUDA backend on one GPU. Its methods are safe for
// concurrent use; work is queued in call order on one stream.
type Backend struct {
	dev *cuda.Device
	ks  *kernels.Set
	s   *cuda.Stream

	mu      sync.Mutex
	tables  map[string]*table // segment tables by their static content
	recent  map[byte]*table   // the table each kind of table used last (a lookup without a key)
	retired []*table          // tables dropped while a captured graph may read their capture copies
	plans   map[*table]bool   // the tables of open plans, freed by Close if their plans are not
	rb      *readback         // ReadLater's memory (nil until its first call)
	closed  bool

	orderMu      sync.Mutex
	waited       collective.Work // the newest work the stream waited for outside a capture (After)
	skippedWaits int64           // works After found already waited for
}

// New opens GPU ordinal, loads the kernels in the variant its compute
// capability takes (kernels.VariantFor) and creates the compute stream.
// Without a driver or device the error matches ErrUnavailable and
// ErrNoDriver or ErrNoDevice.
func New(ordinal int) (*Backend, error) {
	dev, err := cuda.Open(ordinal)
	if err != nil {
		if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("gpu: opening device %d: %w", ordinal, err)
	}
	ks, err := kernels.Load(dev)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("gpu: %w", err)
	}
	s, err := dev.NewStream()
	if err != nil {
		ks.Close()
		dev.Close()
		return nil, fmt.Errorf("gpu: %w", err)
	}
	b := &Backend{dev: dev, ks: ks, s: s, tables: map[string]*table{}, recent: map[byte]*table{}, plans: map[*table]bool{}}
	if err := b.readbackFor(readbackMin); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Name implements backend.Backend: the device and the kernels' variant
// and code, "cuda:0 NVIDIA H200 (sm_90, kernels sm90: sm_90 cubin x14)".
func (b *Backend) Name() string {
	i := b.dev.Info()
	return fmt.Sprintf("cuda:%d %s (sm_%d%d, kernels %v: %s)", i.Ordinal, i.Name, i.Major, i.Minor, b.ks.Variant(), b.ks.ImageSummary())
}

// Memory implements backend.Backend: buffer.Device.
func (b *Backend) Memory() buffer.MemoryKind { return buffer.Device }

// Device returns the CUDA device (for communicators that share it).
func (b *Backend) Device() *pcuda.Device { return cudalink.PublicDevice(b.dev) }

// Stream returns the compute stream all the backend's work runs on.
func (b *Backend) Stream() *pcuda.Stream { return cudalink.PublicStream(b.s) }

// Ordinal returns the GPU's ordinal.
func (b *Backend) Ordinal() int { return b.dev.Ordinal() }

// dbuf returns b as a buffer of this backend's device; anything else is a
// programmer error.
func (b *Backend) dbuf(x buffer.Buffer) buffer.DeviceBuffer {
	d, ok := x.(buffer.DeviceBuffer)
	if !ok {
		panic(fmt.Sprintf("gpu: backend given a %T", x))
	}
	if d.Size > 0 && d.Device != b.dev.Ordinal() {
		panic(fmt.Sprintf("gpu: backend of device %d given a buffer of device %d", b.dev.Ordinal(), d.Device))
	}
	return d
}

// ptr returns the device address of x (0 for nil or an empty buffer).
func (b *Backend) ptr(x buffer.Buffer) cuda.DevicePtr {
	if x == nil {
		return 0
	}
	return cuda.DevicePtr(b.dbuf(x).Ptr)
}

// Alloc implements backend.Backend: n zeroed bytes of device memory
// (the zeroing is complete when Alloc returns). Zero bytes give an empty
// buffer with a nil address.
func (b *Backend) Alloc(n int) (buffer.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("gpu: alloc of %d bytes", n)
	}
	if n == 0 {
		return buffer.DeviceBuffer{Device: b.dev.Ordinal()}, nil
	}
	p, err := b.dev.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	err = b.s.Memset8(p, 0, n)
	if err == nil {
		err = b.s.Synchronize()
	}
	if err != nil {
		b.dev.Free(p)
		return nil, fmt.Errorf("gpu: %w", err)
	}
	return buffer.DeviceBuffer{Ptr: uintptr(p), Size: n, Device: b.dev.Ordinal()}, nil
}

// Free implements backend.Backend. It waits for the stream first, so
// that no queued work still uses the memory.
func (b *Backend) Free(x buffer.Buffer) {
	d := b.dbuf(x)
	if d.Ptr == 0 {
		return
	}
	b.s.Synchronize()
	b.dev.Free(cuda.DevicePtr(d.Ptr))
}

// Write implements backend.Backend; it returns when the copy is done.
func (b *Backend) Write(dst buffer.Buffer, off int, src []byte) error {
	d := b.dbuf(dst)
	checkRange("Write", d, off, len(src))
	return b.s.Upload(cuda.DevicePtr(d.Ptr).Add(off), src)
}

// Read implements backend.Backend; it waits for all earlier work.
func (b *Backend) Read(dst []byte, src buffer.Buffer, off int) error {
	d := b.dbuf(src)
	checkRange("Read", d, off, len(dst))
	return b.s.Download(dst, cuda.DevicePtr(d.Ptr).Add(off))
}

// Zero implements backend.Backend (queued).
func (b *Backend) Zero(x buffer.Buffer, off, n int) error {
	d := b.dbuf(x)
	checkRange("Zero", d, off, n)
	return b.s.Memset8(cuda.DevicePtr(d.Ptr).Add(off), 0, n)
}

func checkRange(op string, d buffer.DeviceBuffer, off, n int) {
	if off < 0 || n < 0 || off+n > d.Size {
		panic(fmt.Sprintf("gpu: %s of [%d, %d) of a %d-byte buffer", op, off, off+n, d.Size))
	}
}

// Sync implements backend.Backend.
func (b *Backend) Sync() error { return b.s.Synchronize() }

// GradStats implements backend.Backend (two launches, one hand-over to
// the device's worker: the sums, then the normalisation of stats).
func (b *Backend) GradStats(stats, grad buffer.Buffer, gt buffer.DType, n int) error {
	return b.dev.Do(func() error { return b.ks.GradStats(b.s, b.ptr(stats), b.ptr(grad), n, isBF16(gt)) })
}

func isBF16(dt buffer.DType) bool {
	switch dt {
	case buffer.BFloat16:
		return true
	case buffer.Float32:
		return false
	}
	panic(fmt.Sprintf("gpu: element type %v", dt))
}

// Update implements backend.Backend: one launch over all segments.
func (b *Backend) Update(a *backend.UpdateArgs) error {
	t := kernels.PackSegments(kernelSegments(a.Rule, a.Segments, nil))
	return b.onWorker(func() error {
		tp, err := b.table('u', t)
		if err != nil {
			return err
		}
		return b.ks.Update(b.s, b.updateLaunch(a, t, tp))
	})
}

// updateLaunch returns the launch of a's update over table t, uploaded at
// tp: a's scalars, flags and buffers (a table over several shards carries
// the shards' own buffers, and the launch's are not read).
func (b *Backend) updateLaunch(a *backend.UpdateArgs, t kernels.Table, tp cuda.DevicePtr) *kernels.UpdateLaunch {
	h := a.Hyper
	l := &kernels.UpdateLaunch{
		Rule: kernels.Rule(a.Rule),
		Hyper: kernels.Hyper{GradScale: h.GradScale, Beta1: h.Beta1, Beta2: h.Beta2, OneMinusBeta1: h.OneMinusBeta1,
			OneMinusBeta2: h.OneMinusBeta2, Eps: h.Eps, SqrtVCorrection: h.SqrtVCorrection, Momentum: h.Momentum},
		Master: b.ptr(a.Master), Table: t, TablePtr: tp,
		Format: a.Recipe.Format, FP8: b.ptr(a.FP8), BlockScales: b.ptr(a.BlockScales),
		MX: a.Recipe.ScaleType() == fp8.ScaleE8M0, Margin: a.Recipe.Margin, PowerOf2: a.Recipe.PowerOf2,
		Amax: b.ptr(a.Amax), Scale: b.ptr(a.Scale), HP: b.ptr(a.HP), Control: b.ptr(a.Control),
	}
	if a.Rule != backend.RuleNone {
		l.M, l.V, l.Grad = b.ptr(a.M), b.ptr(a.V), b.ptr(a.Grad)
		l.MomentBF16, l.GradBF16 = isBF16(a.MomentType), isBF16(a.GradType)
		setMoments(l, a)
		l.MScales, l.VScales = b.ptr(a.MScales), b.ptr(a.VScales)
	}
	if a.HP != nil && a.HPType != 0 {
		l.HPBF16 = isBF16(a.HPType)
	}
	return l
}

// Cast implements backend.Backend: one launch over the segments of modes
// ModeTensorCurrent and ModeTile.
func (b *Backend) Cast(a *backend.CastArgs) error {
	t := kernels.PackSegments(kernelSegments(backend.RuleNone, a.Segments, castModes))
	return b.onWorker(func() error {
		tp, err := b.table('c', t)
		if err != nil {
			return err
		}
		return b.ks.CastSegments(b.s, b.ptr(a.FP8), b.ptr(a.Master), t, tp, b.ptr(a.Scale), a.Format, b.ptr(a.Control))
	})
}

// castModes reports whether a segment of mode m is cast by Cast.
func castModes(m backend.Mode) bool {
	return m == backend.ModeTensorCurrent || m == backend.ModeTile
}

// kernelSegments returns the segments of ss whose mode keep accepts (all
// when keep is nil) as the kernels read them, with rule r's factors.
func kernelSegments(r backend.Rule, ss []backend.Segment, keep func(backend.Mode) bool) []kernels.Segment {
	return appendKernelSegments(make([]kernels.Segment, 0, len(ss)), r, ss, keep)
}

// appendKernelSegments appends kernelSegments(r, ss, keep) to dst.
func appendKernelSegments(dst []kernels.Segment, r backend.Rule, ss []backend.Segment, keep func(backend.Mode) bool) []kernels.Segment {
	for _, s := range ss {
		if keep == nil || keep(s.Mode) {
			dst = append(dst, kernelSegment(r, s))
		}
	}
	return dst
}

// kernelSegment returns s as the kernels read it, with rule r's factors.
func kernelSegment(r backend.Rule, s backend.Segment) kernels.Segment {
	step, second := s.Pair(r)
	return kernels.Segment{Off: s.Off, Len: s.Len, Mode: uint32(s.Mode), Slot: uint32(s.Slot),
		StepSize: step, Decay: second, ParamOffset: s.ParamOffset, Cols: s.Cols}
}

// onWorker runs fn on the device's worker (cuda.Device.Do) with b.mu
// held: the device calls fn makes (a table's upload and its event, a
// launch) cost one hand-over between threads in all, not one each. b.mu is
// taken only there, so its holder never waits for the worker; fn must not
// call onWorker again.
func (b *Backend) onWorker(fn func() error) error {
	return b.dev.Do(func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.closed {
			return cuda.ErrClosed
		}
		return fn()
	})
}

// Close implements backend.Backend: it waits for the stream, frees the
// cached tables, unloads the kernels and closes the device. Buffers not
// freed before are released with the device's primary context.
func (b *Backend) Close() error {
	var err error
	if e := b.onWorker(func() error {
		b.closed = true
		err = errors.Join(b.freeTables(), b.freeReadback())
		if e := b.s.Destroy(); e != nil && err == nil {
			err = e
		}
		if e := b.ks.Close(); e != nil && err == nil {
			err = e
		}
		return nil
	}); e != nil {
		return nil // closed before
	}
	if e := b.dev.Close(); e != nil && err == nil {
		err = e
	}
	return err
}

var _ backend.Backend = (*Backend)(nil)

func ptrOf(d buffer.DeviceBuffer) cuda.DevicePtr { return cuda.DevicePtr(d.Ptr) }
