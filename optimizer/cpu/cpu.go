package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// cpuChunk is the number of elements one goroutine of GradStats and Cast
// takes at a time: a multiple of every block size, and small enough that a
// chunk's squares cannot overflow the unnormalised limbs. (Update takes
// chunks of updateChunk.)
const cpuChunk = 1 << 16

// Backend is the reference backend: host memory, pure Go, split over goroutines
// for large shards. Results do not depend on the number of goroutines.
type Backend struct {
	workers int
}

// New returns a CPU backend using up to workers goroutines (GOMAXPROCS
// when workers < 1).
func New(workers int) *Backend {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &Backend{workers: workers}
}

// Name implements Backend.
func (c *Backend) Name() string { return fmt.Sprintf("cpu (%d goroutines)", c.workers) }

// Memory implements Backend.
func (c *Backend) Memory() buffer.MemoryKind { return buffer.Host }

func hostBuf(b buffer.Buffer) buffer.HostBuffer {
	h, ok := b.(buffer.HostBuffer)
	if !ok && b != nil {
		panic(fmt.Sprintf("cpu: backend given a %T", b))
	}
	return h
}

// Alloc implements Backend. Buffers are 64-byte aligned.
func (c *Backend) Alloc(n int) (buffer.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: alloc of %d bytes", n)
	}
	if err := checkHostAlloc(n); err != nil {
		return nil, err
	}
	raw := make([]byte, n+64)
	off := 0
	if n > 0 {
		off = int(-uintptr(unsafe.Pointer(&raw[0])) & 63)
	}
	return buffer.HostBuffer(raw[off : off+n : off+n]), nil
}

// Free implements Backend (the garbage collector reclaims host buffers).
func (c *Backend) Free(buffer.Buffer) {}

// Write implements Backend.
func (c *Backend) Write(dst buffer.Buffer, off int, src []byte) error {
	copy(hostBuf(dst)[off:off+len(src)], src)
	return nil
}

// Read implements Backend.
func (c *Backend) Read(dst []byte, src buffer.Buffer, off int) error {
	copy(dst, hostBuf(src)[off:off+len(dst)])
	return nil
}

// Zero implements Backend.
func (c *Backend) Zero(b buffer.Buffer, off, n int) error {
	clear(hostBuf(b)[off : off+n])
	return nil
}

// Sync implements Backend.
func (c *Backend) Sync() error { return nil }

// Close implements Backend.
func (c *Backend) Close() error { return nil }

func f32s(b buffer.Buffer) []float32 {
	h := hostBuf(b)
	if len(h) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&h[0])), len(h)/4)
}

func u16s(b buffer.Buffer) []uint16 {
	h := hostBuf(b)
	if len(h) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&h[0])), len(h)/2)
}

func u32s(b buffer.Buffer) []uint32 {
	h := hostBuf(b)
	if len(h) < 4 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&h[0])), len(h)/4)
}

func i64s(b buffer.Buffer) []int64 {
	h := hostBuf(b)
	if len(h) < 8 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&h[0])), len(h)/8)
}

// each runs fn(worker, k) for every k in [0, count) on up to c.workers
// goroutines that take the indices in turn; worker is the goroutine's index
// in [0, c.workers). It is the CPU backend's one worker pool: callers keep
// per-worker partial results (sums, maxima) that do not depend on which
// worker took which index.
func (c *Backend) each(count int, fn func(worker, k int)) {
	w := min(c.workers, count)
	if w <= 1 {
		for k := range count {
			fn(0, k)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for worker := range w {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(count); k = next.Add(1) - 1 {
				fn(worker, int(k))
			}
		})
	}
	wg.Wait()
}

// parallel runs fn over [0, n) in chunks of cpuChunk elements on up to
// c.workers goroutines; fn receives the worker index.
func (c *Backend) parallel(n int, fn func(worker, lo, hi int)) {
	c.each((n+cpuChunk-1)/cpuChunk, func(worker, k int) {
		lo := k * cpuChunk
		fn(worker, lo, min(lo+cpuChunk, n))
	})
}

// GradStats implements Backend.
func (c *Backend) GradStats(stats, grad buffer.Buffer, gt buffer.DType, n int) error {
	var add func(s *[backend.StatsLen]int64, lo, hi int)
	switch gt {
	case buffer.Float32:
		g := f32s(grad)
		add = func(s *[backend.StatsLen]int64, lo, hi int) { addSquares(s, g[lo:hi]) }
	case buffer.BFloat16:
		g := u16s(grad)
		add = func(s *[backend.StatsLen]int64, lo, hi int) { addSquares(s, g[lo:hi]) }
	default:
		panic(badElem(gt))
	}
	partial := make([][backend.StatsLen]int64, c.workers)
	c.parallel(n, func(w, lo, hi int) {
		var s [backend.StatsLen]int64
		add(&s, lo, hi)
		backend.Normalize(&s)
		for k := range s {
			partial[w][k] += s[k]
		}
	})
	out := i64s(stats)
	for _, p := range partial {
		for k := range p {
			out[k] += p[k]
		}
	}
	var s [backend.StatsLen]int64
	copy(s[:], out)
	backend.Normalize(&s)
	copy(out, s[:])
	return nil
}

// addSquares is AddSquare over the widened elements of g.
func addSquares[G elem](s *[backend.StatsLen]int64, g []G) {
	for _, x := range g {
		backend.AddSquare(s, widen(x))
	}
}

// Cast implements Backend.
func (c *Backend) Cast(a *backend.CastArgs) error {
	if _, skip, err := controlled(a.Control, 0); err != nil || skip {
		return err
	}
	master := f32s(a.Master)
	scales := f32s(a.Scale)
	out := hostBuf(a.FP8)
	for _, s := range a.Segments {
		seg := s
		switch seg.Mode {
		case backend.ModeTensorCurrent:
			c.parallel(seg.Len, func(_, lo, hi int) {
				fp8.CastScaled(out[seg.Off+lo:seg.Off+hi], master[seg.Off+lo:seg.Off+hi], scales[seg.Slot], a.Format)
			})
		case backend.ModeTile:
			c.parallel(seg.Len, func(_, lo, hi int) {
				fp8.CastTiles(out[seg.Off+lo:seg.Off+hi], master[seg.Off+lo:seg.Off+hi], seg.ParamOffset+lo, seg.Cols, 128, scales[seg.Slot:], a.Format)
			})
		}
	}
	return nil
}
