package cpu

import (
	"math"
	"unsafe"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// updateChunk is the number of elements of a segment that one goroutine of
// Update takes at a time: a multiple of every block size; small enough that
// the chunk's master, moments and gradient (at most 16 bytes an element,
// 256 KiB) are still in the core's cache when the mode's pass reads the new
// master; and below the size from which the fp8 kernels start goroutines of
// their own (1<<16), so that Update runs on at most c.workers goroutines.
const updateChunk = 1 << 14

// Update implements Backend. Each chunk of a segment is updated by the
// rule's loop for the storage types (cpu_rules.go), which also returns the
// chunk's amax; the mode's pass then runs over the chunk's new master. With
// a control block, its gradient scale replaces Hyper's, and a skipped step
// writes nothing.
func (c *Backend) Update(a *backend.UpdateArgs) error {
	gs, skip, err := controlled(a.Control, a.Hyper.GradScale)
	if err != nil || skip {
		return err
	}
	if gs != a.Hyper.GradScale {
		b := *a
		b.Hyper.GradScale = gs
		a = &b
	}
	master := f32s(a.Master)
	run := ruleRunOf(a)
	var amax []uint32
	if a.Amax != nil {
		amax = u32s(a.Amax)
	}
	partial := make([][]uint32, c.workers)
	for w := range partial {
		partial[w] = make([]uint32, len(amax))
	}
	c.forChunks(a.Segments, func(w int, s *backend.Segment, lo, hi int) {
		var key uint32
		if run != nil {
			key = run(master[s.Off+lo:s.Off+hi], s.Off+lo, s)
		}
		c.after(a, s, partial[w], master, lo, hi, key, run != nil)
	})
	for _, p := range partial {
		for k, x := range p {
			amax[k] = max(amax[k], x)
		}
	}
	return nil
}

// forChunks calls fn(worker, s, lo, hi) for every chunk [lo, hi) of
// updateChunk elements (counted from s.Off) of every segment s of segs, on
// up to c.workers goroutines that take the chunks in turn; worker is the
// goroutine's index in [0, c.workers).
func (c *Backend) forChunks(segs []backend.Segment, fn func(worker int, s *backend.Segment, lo, hi int)) {
	type piece struct{ seg, lo int }
	var pieces []piece
	for k, s := range segs {
		for lo := 0; lo < s.Len; lo += updateChunk {
			pieces = append(pieces, piece{k, lo})
		}
	}
	c.each(len(pieces), func(worker, k int) {
		p := pieces[k]
		s := &segs[p.seg]
		fn(worker, s, p.lo, min(p.lo+updateChunk, s.Len))
	})
}

// after does what follows the update of elements [lo, hi) of segment s:
// key is the largest AbsBits of the new masters there when updated is true
// (the rule's loop computed it), and is recomputed otherwise (backend.RuleNone).
func (c *Backend) after(a *backend.UpdateArgs, s *backend.Segment, amax []uint32, master []float32, lo, hi int, key uint32, updated bool) {
	i0, i1 := s.Off+lo, s.Off+hi
	src := master[i0:i1]
	switch s.Mode {
	case backend.ModeHighPrecision:
		switch a.HPType {
		case buffer.Float32:
			copy(f32s(a.HP)[i0:i1], src)
		case buffer.BFloat16:
			narrowAll(u16s(a.HP)[i0:i1], src)
		default:
			panic(badElem(a.HPType))
		}
	case backend.ModeTensorCurrent:
		if !updated {
			key = math.Float32bits(fp8.Amax(src))
		}
		amax[s.Slot] = max(amax[s.Slot], key)
	case backend.ModeTensorDelayed:
		scale := f32s(a.Scale)[s.Slot]
		am := fp8.CastScaled(hostBuf(a.FP8)[i0:i1], src, scale, a.Recipe.Format)
		amax[s.Slot] = max(amax[s.Slot], math.Float32bits(am))
	case backend.ModeBlock:
		_, block := a.Recipe.Block()
		dst := hostBuf(a.FP8)[i0:i1]
		first := i0 / block
		nb := (hi - lo + block - 1) / block
		if a.Recipe.ScaleType() == fp8.ScaleE8M0 {
			fp8.CastMX(dst, hostBuf(a.BlockScales)[first:first+nb], src, a.Recipe.Format)
		} else {
			fp8.CastBlocks1D(dst, f32s(a.BlockScales)[first:first+nb], src, block, a.Recipe.Format, a.Recipe.Margin, a.Recipe.PowerOf2)
		}
	case backend.ModeTile:
		fp8.TileAmax(amaxFloats(amax[s.Slot:]), src, s.ParamOffset+lo, s.Cols, 128)
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
