package cpu

import (
	"fmt"
	"sync"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/backend"
)

// This file holds the CPU backend's update of moments stored in different
// types, or in FP8 with block scales: the moments of a chunk are widened to
// float32 (backend.DecodeMoment for FP8), the rule's float32 loop of
// cpu_rules.go runs over them, and they are stored back
// (backend.EncodeMomentBlock per block for FP8).

// momentStore is one moment buffer of any backend.MomentDType.
type momentStore struct {
	t      backend.MomentDType
	f32    []float32
	u16    []uint16
	codes  []byte
	scales []float32 // FP8: scale_inv per block
	block  int
	root   bool // FP8 codes hold the square root (the second moment)
	seed   uint32
	base   int // bucket position of element 0
}

// newMomentStore returns the store of buffer b (scales: the FP8 block
// scales) of type t.
func newMomentStore(t backend.MomentDType, b, scales buffer.Buffer, block int, root bool) *momentStore {
	s := &momentStore{t: t, block: block, root: root}
	switch t {
	case backend.MomentFloat32:
		s.f32 = f32s(b)
	case backend.MomentBFloat16:
		s.u16 = u16s(b)
	case backend.MomentFP8:
		if block < 1 {
			panic(fmt.Sprintf("cpu: FP8 moments in blocks of %d", block))
		}
		s.codes, s.scales = hostBuf(b), f32s(scales)
	default:
		panic(fmt.Sprintf("cpu: moment type %s", t))
	}
	return s
}

// load widens elements [off, off+len(dst)) into dst.
func (s *momentStore) load(dst []float32, off int) {
	switch s.t {
	case backend.MomentFloat32:
		copy(dst, s.f32[off:])
	case backend.MomentBFloat16:
		for i := range dst {
			dst[i] = widen(s.u16[off+i])
		}
	case backend.MomentFP8:
		for i := range dst {
			dst[i] = backend.DecodeMoment(s.codes[off+i], s.scales[(off+i)/s.block], s.root)
		}
	}
}

// store narrows src into elements [off, off+len(src)); for FP8, off is the
// first element of a block and the blocks are encoded one by one (the last
// one may be partial).
func (s *momentStore) store(src []float32, off int) {
	switch s.t {
	case backend.MomentFloat32:
		copy(s.f32[off:], src)
	case backend.MomentBFloat16:
		narrowAll(s.u16[off:], src)
	case backend.MomentFP8:
		if off%s.block != 0 {
			panic(fmt.Sprintf("cpu: FP8 moments stored from element %d, not a block start", off))
		}
		for b := 0; b < len(src); b += s.block {
			e := min(b+s.block, len(src))
			s.scales[(off+b)/s.block] = backend.EncodeMomentBlock(s.codes[off+b:off+e], src[b:e], s.root, s.seed, uint64(s.base+off+b))
		}
	}
}

// uniformMoments reports whether a's moments are both float32 or both
// bfloat16 (the loops of cpu_rules.go read them in place).
func uniformMoments(a *backend.UpdateArgs) bool {
	m, v := a.MomentTypes()
	return m == v && m != backend.MomentFP8
}

// scratchPool holds the float32 moments of a chunk (2*updateChunk).
var scratchPool = sync.Pool{New: func() any { return new([2 * updateChunk]float32) }}

// mixedRule is ruleRunOf for moments of other storage: each chunk's
// moments are widened, updated by the float32 loop and stored back.
func mixedRule[G elem](a *backend.UpdateArgs, g []G) ruleRun {
	mt, vt := a.MomentTypes()
	h := a.Hyper
	ms := newMomentStore(mt, a.M, a.MScales, a.MomentBlock, false)
	switch a.Rule {
	case backend.RuleAdamW:
		vs := newMomentStore(vt, a.V, a.VScales, a.MomentBlock, true)
		vs.seed, vs.base = a.MomentSeed, a.MomentBase
		return func(p []float32, off int, s *backend.Segment) uint32 {
			buf := scratchPool.Get().(*[2 * updateChunk]float32)
			defer scratchPool.Put(buf)
			m, v := buf[:len(p)], buf[updateChunk:updateChunk+len(p)]
			ms.load(m, off)
			vs.load(v, off)
			key := adamwRun(p, m, v, g[off:off+len(p)], &h, s.StepSize, s.Shrink)
			ms.store(m, off)
			vs.store(v, off)
			return key
		}
	case backend.RuleSGD:
		return func(p []float32, off int, s *backend.Segment) uint32 {
			buf := scratchPool.Get().(*[2 * updateChunk]float32)
			defer scratchPool.Put(buf)
			m := buf[:len(p)]
			ms.load(m, off)
			key := sgdRun(p, m, g[off:off+len(p)], &h, s.StepSize, s.WeightDecay)
			ms.store(m, off)
			return key
		}
	}
	panic(fmt.Sprintf("cpu: rule %d", a.Rule))
}
