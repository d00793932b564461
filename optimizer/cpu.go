package optimizer

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
)

// cpuChunk is the number of elements one goroutine of the CPU backend takes
// at a time: a multiple of every block size, and small enough that a chunk's
// squares cannot overflow the unnormalised limbs.
const cpuChunk = 1 << 16

// CPU is the reference backend: host memory, pure Go, split over goroutines
// for large shards. Results do not depend on the number of goroutines.
type CPU struct {
	workers int
}

// NewCPU returns a CPU backend using up to workers goroutines (GOMAXPROCS
// when workers < 1).
func NewCPU(workers int) *CPU {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &CPU{workers: workers}
}

// Name implements Backend.
func (c *CPU) Name() string { return fmt.Sprintf("cpu (%d goroutines)", c.workers) }

// Memory implements Backend.
func (c *CPU) Memory() collective.MemoryKind { return collective.Host }

func hostBuf(b collective.Buffer) collective.HostBuffer {
	h, ok := b.(collective.HostBuffer)
	if !ok && b != nil {
		panic(fmt.Sprintf("optimizer: cpu backend given a %T", b))
	}
	return h
}

// Alloc implements Backend. Buffers are 64-byte aligned.
func (c *CPU) Alloc(n int) (collective.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("optimizer: cpu alloc of %d bytes", n)
	}
	raw := make([]byte, n+64)
	off := 0
	if n > 0 {
		off = int(-uintptr(unsafe.Pointer(&raw[0])) & 63)
	}
	return collective.HostBuffer(raw[off : off+n : off+n]), nil
}

// Free implements Backend (the garbage collector reclaims host buffers).
func (c *CPU) Free(collective.Buffer) {}

// Write implements Backend.
func (c *CPU) Write(dst collective.Buffer, off int, src []byte) error {
	copy(hostBuf(dst)[off:off+len(src)], src)
	return nil
}

// Read implements Backend.
func (c *CPU) Read(dst []byte, src collective.Buffer, off int) error {
	copy(dst, hostBuf(src)[off:off+len(dst)])
	return nil
}

// Zero implements Backend.
func (c *CPU) Zero(b collective.Buffer, off, n int) error {
	clear(hostBuf(b)[off : off+n])
	return nil
}

// Sync implements Backend.
func (c *CPU) Sync() error { return nil }

// Close implements Backend.
func (c *CPU) Close() error { return nil }

func f32s(b collective.Buffer) []float32 {
	h := hostBuf(b)
	if len(h) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&h[0])), len(h)/4)
}

func u16s(b collective.Buffer) []uint16 {
	h := hostBuf(b)
	if len(h) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&h[0])), len(h)/2)
}

func u32s(b collective.Buffer) []uint32 {
	h := hostBuf(b)
	if len(h) < 4 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&h[0])), len(h)/4)
}

func i64s(b collective.Buffer) []int64 {
	h := hostBuf(b)
	if len(h) < 8 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&h[0])), len(h)/8)
}

// elems reads and writes a float32 or bfloat16 array as float32.
type elems struct {
	f []float32
	h []uint16
}

func elemsOf(b collective.Buffer, dt collective.DType) elems {
	switch dt {
	case collective.Float32:
		return elems{f: f32s(b)}
	case collective.BFloat16:
		return elems{h: u16s(b)}
	}
	panic(fmt.Sprintf("optimizer: element type %s", dt))
}

func (e elems) get(i int) float32 {
	if e.f != nil {
		return e.f[i]
	}
	return fp8.Float32FromBF16(e.h[i])
}

func (e elems) set(i int, x float32) {
	if e.f != nil {
		e.f[i] = x
		return
	}
	e.h[i] = fp8.BF16FromFloat32(x)
}

// load returns elements [i0, i1) as float32: the array itself for float32
// storage, a widened copy for bfloat16.
func (e elems) load(i0, i1 int, scratch []float32) []float32 {
	if e.f != nil {
		return e.f[i0:i1]
	}
	out := scratch[:i1-i0]
	for i, h := range e.h[i0:i1] {
		out[i] = fp8.Float32FromBF16(h)
	}
	return out
}

// store writes back what load returned (a no-op for float32 storage).
func (e elems) store(i0 int, x []float32) {
	if e.f != nil {
		return
	}
	for i, f := range x {
		e.h[i0+i] = fp8.BF16FromFloat32(f)
	}
}

// parallel runs fn over [0, n) in chunks of cpuChunk elements on up to
// c.workers goroutines; fn receives the worker index.
func (c *CPU) parallel(n int, fn func(worker, lo, hi int)) {
	chunks := (n + cpuChunk - 1) / cpuChunk
	w := min(c.workers, chunks)
	if w <= 1 {
		for lo := 0; lo < n; lo += cpuChunk {
			fn(0, lo, min(lo+cpuChunk, n))
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, chunks)
	for k := range chunks {
		next <- k * cpuChunk
	}
	close(next)
	for worker := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := range next {
				fn(worker, lo, min(lo+cpuChunk, n))
			}
		}()
	}
	wg.Wait()
}

// GradStats implements Backend.
func (c *CPU) GradStats(stats, grad collective.Buffer, gt collective.DType, n int) error {
	g := elemsOf(grad, gt)
	partial := make([][StatsLen]int64, c.workers)
	c.parallel(n, func(w, lo, hi int) {
		var s [StatsLen]int64
		for i := lo; i < hi; i++ {
			AddSquare(&s, g.get(i))
		}
		Normalize(&s)
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
	var s [StatsLen]int64
	copy(s[:], out)
	Normalize(&s)
	copy(out, s[:])
	return nil
}

// Update implements Backend.
func (c *CPU) Update(a *UpdateArgs) error {
	master := f32s(a.Master)
	var m, v, g elems
	if a.Rule != RuleNone {
		m = elemsOf(a.M, a.MomentType)
		if a.Rule == RuleAdamW {
			v = elemsOf(a.V, a.MomentType)
		}
		g = elemsOf(a.Grad, a.GradType)
	}
	var amax []uint32
	if a.Amax != nil {
		amax = u32s(a.Amax)
	}
	partial := make([][]uint32, c.workers)
	scratch := make([][3][]float32, c.workers)
	for w := range partial {
		partial[w] = make([]uint32, len(amax))
		if a.Rule != RuleNone {
			for k := range scratch[w] {
				scratch[w][k] = make([]float32, min(cpuChunk, a.N))
			}
		}
	}
	for _, s := range a.Segments {
		seg := s
		c.parallel(seg.Len, func(w, lo, hi int) {
			i0, i1 := seg.Off+lo, seg.Off+hi
			p := master[i0:i1]
			switch a.Rule {
			case RuleAdamW:
				sc := scratch[w]
				gs, ms, vs := g.load(i0, i1, sc[0]), m.load(i0, i1, sc[1]), v.load(i0, i1, sc[2])
				for i := range p {
					p[i], ms[i], vs[i] = AdamWElem(p[i], ms[i], vs[i], gs[i], &a.Hyper, seg.StepSize, seg.Decay)
				}
				m.store(i0, ms)
				v.store(i0, vs)
			case RuleSGD:
				sc := scratch[w]
				gs, ms := g.load(i0, i1, sc[0]), m.load(i0, i1, sc[1])
				for i := range p {
					p[i], ms[i] = SGDElem(p[i], ms[i], gs[i], &a.Hyper, seg.StepSize, seg.Decay)
				}
				m.store(i0, ms)
			}
			c.after(a, &seg, partial[w], master, lo, hi)
		})
	}
	for _, p := range partial {
		for k, x := range p {
			amax[k] = max(amax[k], x)
		}
	}
	return nil
}

// after does what follows the update of elements [lo, hi) of segment s.
func (c *CPU) after(a *UpdateArgs, s *Segment, amax []uint32, master []float32, lo, hi int) {
	src := master[s.Off+lo : s.Off+hi]
	switch s.Mode {
	case ModeHighPrecision:
		out := elemsOf(a.HP, a.HPType)
		for i, x := range src {
			out.set(s.Off+lo+i, x)
		}
	case ModeTensorCurrent:
		amax[s.Slot] = max(amax[s.Slot], math.Float32bits(fp8.Amax(src)))
	case ModeTensorDelayed:
		scale := f32s(a.Scale)[s.Slot]
		dst := hostBuf(a.FP8)[s.Off+lo : s.Off+hi]
		am := fp8.CastScaled(dst, src, scale, a.Recipe.Format)
		amax[s.Slot] = max(amax[s.Slot], math.Float32bits(am))
	case ModeBlock:
		_, block := a.Recipe.Block()
		dst := hostBuf(a.FP8)[s.Off+lo : s.Off+hi]
		first := (s.Off + lo) / block
		nb := (hi - lo + block - 1) / block
		if a.Recipe.Scaling == fp8.MXFP8 {
			fp8.CastMX(dst, hostBuf(a.BlockScales)[first:first+nb], src, a.Recipe.Format)
		} else {
			fp8.CastBlocks1D(dst, f32s(a.BlockScales)[first:first+nb], src, block, a.Recipe.Format, a.Recipe.Margin, a.Recipe.PowerOf2)
		}
	case ModeTile:
		tiles := amaxFloats(amax[s.Slot:])
		fp8.TileAmax(tiles, src, s.ParamOffset+lo, s.Cols, 128)
	}
}

// amaxFloats views amax keys as the float32 values fp8.TileAmax folds into
// (for non-negative floats the key is the value's own bit pattern).
func amaxFloats(keys []uint32) []float32 {
	if len(keys) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&keys[0])), len(keys))
}

// Cast implements Backend.
func (c *CPU) Cast(a *CastArgs) error {
	master := f32s(a.Master)
	scales := f32s(a.Scale)
	out := hostBuf(a.FP8)
	for _, s := range a.Segments {
		seg := s
		switch seg.Mode {
		case ModeTensorCurrent:
			c.parallel(seg.Len, func(_, lo, hi int) {
				fp8.CastScaled(out[seg.Off+lo:seg.Off+hi], master[seg.Off+lo:seg.Off+hi], scales[seg.Slot], a.Format)
			})
		case ModeTile:
			c.parallel(seg.Len, func(_, lo, hi int) {
				fp8.CastTiles(out[seg.Off+lo:seg.Off+hi], master[seg.Off+lo:seg.Off+hi], seg.ParamOffset+lo, seg.Cols, 128, scales[seg.Slot:], a.Format)
			})
		}
	}
	return nil
}
