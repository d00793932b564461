package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// Run runs the whole suite against be.
func Run(t *testing.T, be backend.Backend) {
	t.Run("GradStats", func(t *testing.T) { GradStats(t, be) })
	t.Run("Update", func(t *testing.T) { Update(t, be) })
	t.Run("Moments", func(t *testing.T) { Moments(t, be) })
	t.Run("Cast", func(t *testing.T) { Cast(t, be) })
	t.Run("Shards", func(t *testing.T) { Shards(t, be) })
	t.Run("Plans", func(t *testing.T) { Plans(t, be) })
	t.Run("Control", func(t *testing.T) { Control(t, be) })
	t.Run("Controlled", func(t *testing.T) { Controlled(t, be) })
}

func newPair(t *testing.T, be backend.Backend) *pair {
	p := &pair{t: t, ref: cpu.New(3), be: be}
	t.Cleanup(p.free)
	return p
}

// GradStats checks GradStats on gradients of odd sizes with every kind of
// special value, twice into the same statistics (the second call adds to
// the normalised result of the first).
func GradStats(t *testing.T, be backend.Backend) {
	for _, gt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
		for ci, n := range []int{0, 1, 7, 4099, 100003, 1 << 20} {
			for _, special := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/n=%d/special=%v", gt, n, special), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(ci), uint64(gt)))
					p := newPair(t, be)
					stats := p.upload("stats", make([]byte, 8*backend.StatsLen), bytesExact)
					for call := range 2 {
						x := values(r, n+call, math.Ldexp(1, r.IntN(40)-20), special)
						g := p.upload("grad", encode(x, gt), bytesExact)
						must(t, p.ref.GradStats(stats.ref, g.ref, gt, n+call))
						must(t, p.be.GradStats(stats.be, g.be, gt, n+call))
						p.check(stats)
					}
				})
			}
		}
	}
}

// recipeCase is a recipe and the modes its segments take.
type recipeCase struct {
	name   string
	recipe fp8.Recipe
	modes  []backend.Mode
	hp     buffer.DType
}

func recipeCases() []recipeCase {
	rc := func(f fp8.Format, s fp8.Scaling, margin int, pow2 bool) fp8.Recipe {
		return fp8.Recipe{Format: f, Scaling: s, Margin: margin, PowerOf2: pow2, HistoryLen: 2}
	}
	M := func(m ...backend.Mode) []backend.Mode { return m }
	return []recipeCase{
		{"current/e4m3", rc(fp8.E4M3, fp8.TensorCurrent, 0, false), M(backend.ModeTensorCurrent), 0},
		{"current/e5m2", rc(fp8.E5M2, fp8.TensorCurrent, 1, true), M(backend.ModeTensorCurrent), 0},
		{"delayed/e4m3", rc(fp8.E4M3, fp8.TensorDelayed, 0, false), M(backend.ModeTensorDelayed), 0},
		{"delayed/e5m2", rc(fp8.E5M2, fp8.TensorDelayed, 0, false), M(backend.ModeTensorDelayed), 0},
		{"block1x128/e4m3", rc(fp8.E4M3, fp8.Block1x128, 0, false), M(backend.ModeBlock), 0},
		{"block1x128/e5m2-pow2-margin", rc(fp8.E5M2, fp8.Block1x128, 2, true), M(backend.ModeBlock), 0},
		{"mxfp8/e4m3", rc(fp8.E4M3, fp8.MXFP8, 0, false), M(backend.ModeBlock), 0},
		{"mxfp8/e5m2", rc(fp8.E5M2, fp8.MXFP8, 0, false), M(backend.ModeBlock), 0},
		{"tile/e4m3", rc(fp8.E4M3, fp8.Block128x128, 0, false), M(backend.ModeTile), 0},
		{"tile/e5m2", rc(fp8.E5M2, fp8.Block128x128, 0, false), M(backend.ModeTile), 0},
		{"hp/bf16", fp8.Recipe{}, M(backend.ModeHighPrecision), buffer.BFloat16},
		{"hp/f32", fp8.Recipe{}, M(backend.ModeHighPrecision), buffer.Float32},
		{"mixed/e4m3", rc(fp8.E4M3, fp8.Block1x128, 0, false), M(backend.ModeHighPrecision, backend.ModeTensorCurrent,
			backend.ModeTensorDelayed, backend.ModeBlock, backend.ModeTile), buffer.BFloat16},
		{"mixed/mx-e5m2", rc(fp8.E5M2, fp8.MXFP8, 0, false), M(backend.ModeHighPrecision, backend.ModeTensorCurrent,
			backend.ModeTensorDelayed, backend.ModeBlock, backend.ModeTile), buffer.Float32},
	}
}

// layout is a random set of segments over a shard.
type layout struct {
	n      int
	segs   []backend.Segment
	slots  int
	blocks int // block scales (ModeBlock)
}

// randomLayout places segments of the given modes at random offsets (block
// segments on block boundaries), with gaps between them and after them;
// every segment starts, and every tile segment's ParamOffset lies, at a
// multiple of align (the block of FP8 moments; 1: anywhere).
func randomLayout(r *rand.Rand, modes []backend.Mode, block, align int) layout {
	var l layout
	pos := r.IntN(40)
	nseg := 1 + r.IntN(12)
	for range nseg {
		mode := modes[r.IntN(len(modes))]
		if mode == backend.ModeBlock {
			pos = (pos + block - 1) / block * block
		}
		pos = (pos + align - 1) / align * align
		n := 1 + r.IntN(3*4096)
		if r.IntN(4) == 0 {
			n = 1 + r.IntN(300)
		}
		s := backend.Segment{Off: pos, Len: n, Mode: mode, Slot: l.slots,
			Factors: backend.Factors{StepSize: float32(1e-4 + r.Float64()*1e-2), Shrink: float32(1 - r.Float64()*1e-3)}}
		switch mode {
		case backend.ModeTensorCurrent, backend.ModeTensorDelayed:
			l.slots++
		case backend.ModeTile:
			s.Cols = 1 + r.IntN(400)
			if r.IntN(3) == 0 {
				s.Cols = 128 * (1 + r.IntN(3))
			}
			s.ParamOffset = r.IntN(3*s.Cols*128) / align * align
			top := 0
			for i := range n {
				top = max(top, fp8.TileIndex(s.ParamOffset+i, s.Cols, 128))
			}
			l.slots += top + 1
		}
		l.segs = append(l.segs, s)
		pos += n + r.IntN(3)*r.IntN(70)
	}
	l.n = pos + r.IntN(50)
	l.blocks = l.n/block + 1
	if err := backend.CheckSegments(l.segs, l.n, block); err != nil {
		panic("backendtest: " + err.Error()) // the suite's own tables must be valid
	}
	return l
}

// Update checks Update for every recipe case crossed with rules, moment
// and gradient types.
func Update(t *testing.T, be backend.Backend) {
	type rule struct {
		r      backend.Rule
		mt, gt buffer.DType
	}
	rules := []rule{
		{backend.RuleAdamW, buffer.Float32, buffer.BFloat16},
		{backend.RuleAdamW, buffer.Float32, buffer.Float32},
		{backend.RuleAdamW, buffer.BFloat16, buffer.BFloat16},
		{backend.RuleAdamW, buffer.BFloat16, buffer.Float32},
		{backend.RuleSGD, buffer.Float32, buffer.BFloat16},
		{backend.RuleSGD, buffer.BFloat16, buffer.Float32},
		{backend.RuleNone, buffer.Float32, buffer.Float32},
	}
	for ci, rc := range recipeCases() {
		for ri, ru := range rules {
			for _, special := range []bool{false, true} {
				name := fmt.Sprintf("%s/%v/m=%v/g=%v/special=%v", rc.name, ru.r, ru.mt, ru.gt, special)
				t.Run(name, func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(ci), uint64(ri*2)+b2u(special)))
					updateCase(t, newPair(t, be), r, rc, ru.r, ru.mt, ru.gt, special, noControl)
				})
			}
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func updateCase(t *testing.T, p *pair, r *rand.Rand, rc recipeCase, rule backend.Rule, mt, gt buffer.DType, special bool, ctl controlCase) {
	block := 128 // the tensor recipes' segments are laid out as 1x128's
	if _, cols := rc.recipe.Block(); rc.recipe.LocalBlocks() {
		block = cols
	}
	l := randomLayout(r, rc.modes, block, 1)
	master, grad, m, v := updateInputs(r, l, special)
	amax, scale := randomSlots(r, l.slots)
	a := backend.UpdateArgs{Rule: rule, N: l.n, MomentType: mt, GradType: gt, Recipe: rc.recipe,
		Hyper: backend.Hyper{GradScale: float32(0.5 + r.Float64()), Beta1: 0.9, Beta2: 0.999,
			OneMinusBeta1: float32(1 - 0.9), OneMinusBeta2: float32(1 - 0.999), Eps: 1e-8,
			SqrtVCorrection: float32(1 / math.Sqrt(1-math.Pow(0.999, float64(1+r.IntN(100))))), Momentum: 0.9}}
	bs := []buf{
		p.upload("master", encode(master, buffer.Float32), float32s),
		p.upload("m", encode(m, mt), momentKind(mt)),
		p.upload("v", encode(v, mt), momentKind(mt)),
		p.upload("grad", encode(grad, gt), bytesExact),
		p.upload("fp8", filled(l.n), bytesExact),
		p.upload("amax", u32s(amax), amaxKeys),
		p.upload("scale", encode(scale, buffer.Float32), bytesExact),
	}
	bs = append(bs, p.upload("block scales", filled(rc.recipe.ScaleType().Size()*l.blocks), bytesExact))
	hpType := rc.hp
	if hpType == 0 {
		hpType = buffer.Float32
	}
	bs = append(bs, p.upload("hp", filled(hpType.Size()*l.n), momentKind(hpType)))
	if rule == backend.RuleSGD {
		for i := range l.segs {
			l.segs[i].WeightDecay = float32(r.Float64() * 0.01)
		}
	}
	a.Segments = l.segs
	var cb *buf
	if ctl != noControl {
		c := p.upload("control", controlBlock(r, ctl), bytesExact)
		cb = &c
	}
	for side := range 2 {
		b := a
		pick := func(x buf) buffer.Buffer { return []buffer.Buffer{x.ref, x.be}[side] }
		if cb != nil {
			b.Control = pick(*cb)
		}
		b.Master, b.M, b.V, b.Grad, b.FP8, b.Amax, b.Scale, b.BlockScales = pick(bs[0]), pick(bs[1]), pick(bs[2]), pick(bs[3]), pick(bs[4]), pick(bs[5]), pick(bs[6]), pick(bs[7])
		if rc.hp != 0 {
			b.HP, b.HPType = pick(bs[8]), rc.hp
		}
		if rule == backend.RuleSGD {
			b.V = nil
		}
		if rule == backend.RuleNone {
			b.M, b.V, b.Grad = nil, nil, nil
		}
		be := []backend.Backend{p.ref, p.be}[side]
		must(t, be.Update(&b))
	}
	p.check(bs...)
	if ctl == skipControl {
		p.untouched(bs...)
	}
}

// updateInputs draws an update's master, gradient and moments over layout
// l; elements outside every segment hold the value outside.
func updateInputs(r *rand.Rand, l layout, special bool) (master, grad, m, v []float32) {
	master = values(r, l.n, 0.05, special)
	grad = values(r, l.n, 0.01, special)
	m = values(r, l.n, 0.01, false)
	v = values(r, l.n, 1e-4, false)
	for i := range v {
		v[i] = float32(math.Abs(float64(v[i])))
	}
	zeroRuns(r, master, grad, m, v)
	inside := make([]bool, l.n)
	for _, s := range l.segs {
		for i := s.Off; i < s.Off+s.Len; i++ {
			inside[i] = true
		}
	}
	for i, in := range inside {
		if !in {
			master[i], grad[i], m[i], v[i] = outside, outside, outside, outside
		}
	}
	return master, grad, m, v
}

// randomSlots draws n amax keys (half of them zero) and n scales.
func randomSlots(r *rand.Rand, n int) (amax []uint32, scale []float32) {
	amax = make([]uint32, n)
	scale = make([]float32, n)
	for i := range amax {
		if r.IntN(2) == 0 {
			amax[i] = math.Float32bits(float32(r.Float64() * 0.1))
		}
		scale[i], _ = fp8.ScaleFromAmax(float32(r.Float64()*0.2), fp8.E4M3, 0, false)
	}
	return amax, scale
}

func momentKind(dt buffer.DType) kind {
	if dt == buffer.Float32 {
		return float32s
	}
	return bytesExact
}

// Cast checks Cast over layouts mixing the modes it casts with those it
// must leave alone.
func Cast(t *testing.T, be backend.Backend) {
	modes := []backend.Mode{backend.ModeTensorCurrent, backend.ModeTile, backend.ModeTensorDelayed,
		backend.ModeBlock, backend.ModeHighPrecision}
	for ci := range 12 {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			t.Run(fmt.Sprintf("%d/%v", ci, f), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(ci), uint64(f)))
				p := newPair(t, be)
				l := randomLayout(r, modes, 128, 1)
				master := values(r, l.n, math.Ldexp(1, r.IntN(20)-10), ci%2 == 1)
				scale := make([]float32, l.slots)
				for i := range scale {
					scale[i], _ = fp8.ScaleFromAmax(float32(r.Float64()*2), f, 0, false)
				}
				mb := p.upload("master", encode(master, buffer.Float32), float32s)
				fb := p.upload("fp8", filled(l.n), bytesExact)
				sb := p.upload("scale", encode(scale, buffer.Float32), bytesExact)
				for side, be := range []backend.Backend{p.ref, p.be} {
					pick := func(x buf) buffer.Buffer { return []buffer.Buffer{x.ref, x.be}[side] }
					must(t, be.Cast(&backend.CastArgs{N: l.n, Master: pick(mb), Segments: l.segs, Format: f, FP8: pick(fb), Scale: pick(sb)}))
				}
				p.check(mb, fb, sb)
			})
		}
	}
}
