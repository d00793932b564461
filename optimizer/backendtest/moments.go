package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// Moments checks Update with moments of different types, and FP8 moments
// with their block scales, for AdamW and SGD, every block size, both
// gradient types and recipes whose segments run through every path of the
// kernels (1x128 blocks, MX, 128x128 tiles with whole-row bands,
// high-precision copies): masters, moment codes and block scales byte for
// byte.
func Moments(t *testing.T, be backend.Backend) {
	type types struct{ m, v backend.MomentDType }
	F32, BF16, FP8 := backend.MomentFloat32, backend.MomentBFloat16, backend.MomentFP8
	adamw := []types{{FP8, FP8}, {FP8, BF16}, {BF16, FP8}, {F32, FP8}, {FP8, F32}, {BF16, F32}}
	cases := recipeCases()
	for ci, rc := range cases {
		if rc.name != "mixed/e4m3" && rc.name != "mixed/mx-e5m2" && rc.name != "tile/e4m3" && rc.name != "hp/bf16" {
			continue
		}
		for bi, mb := range backend.MomentBlocks {
			for ti, ty := range append(adamw, types{FP8, 0}, types{BF16, 0}) {
				rule := backend.RuleAdamW
				if ty.v == 0 {
					rule = backend.RuleSGD
				}
				for _, gt := range []buffer.DType{buffer.BFloat16, buffer.Float32} {
					special := (ti+bi)%3 == 0
					name := fmt.Sprintf("%s/%v/m=%v/v=%v/block=%d/g=%v/special=%v", rc.name, rule, ty.m, ty.v, mb, gt, special)
					t.Run(name, func(t *testing.T) {
						r := rand.New(rand.NewPCG(uint64(ci*100+bi), uint64(ti)*2+uint64(gt)))
						momentCase(t, newPair(t, be), r, rc, rule, ty.m, ty.v, mb, gt, special)
					})
				}
			}
		}
	}
}

// momentBuf is one moment's buffers: its elements (or FP8 codes) and the
// FP8 block scales.
type momentBuf struct{ data, scales buf }

// uploadMoment stores x as t (FP8: backend.EncodeMomentBlock per block of
// mb elements of the shard), lead elements (and lead block scales) into
// its allocations.
func uploadMoment(p *pair, name string, x []float32, t backend.MomentDType, mb int, root bool, seed uint32, base, lead int) momentBuf {
	switch t {
	case backend.MomentFloat32:
		return momentBuf{data: p.uploadAfter(name, 4*lead, encode(x, buffer.Float32), float32s)}
	case backend.MomentBFloat16:
		return momentBuf{data: p.uploadAfter(name, 2*lead, encode(x, buffer.BFloat16), bytesExact)}
	}
	codes := make([]byte, len(x))
	inv := make([]float32, (len(x)+mb-1)/mb)
	for k := range inv {
		lo, hi := k*mb, min(k*mb+mb, len(x))
		inv[k] = backend.EncodeMomentBlock(codes[lo:hi], x[lo:hi], root, seed, uint64(base+lo))
	}
	return momentBuf{data: p.uploadAfter(name, lead, codes, bytesExact),
		scales: p.uploadAfter(name+" scales", 4*lead, encode(inv, buffer.Float32), bytesExact)}
}

func momentCase(t *testing.T, p *pair, r *rand.Rand, rc recipeCase, rule backend.Rule, mt, vt backend.MomentDType, mb int, gt buffer.DType, special bool) {
	sh := newMomentShard(p, r, rc, rule, mt, vt, mb, gt, special, placement{align: mb})
	for side := range 2 {
		must(t, []backend.Backend{p.ref, p.be}[side].Update(sh.args(side)))
	}
	p.check(sh.bufs...)
}

// updateShard is one shard of an update case: its arguments on either side
// of a pair (0: the reference, 1: the backend), and the buffers to check.
type updateShard struct {
	args func(side int) *backend.UpdateArgs
	bufs []buf
}

// placement is where newMomentShard puts a shard: its segments start at
// multiples of align (FP8 moments: of their block), and each of its
// buffers lies lead elements (of a block scales buffer: lead scales) into
// its allocation, but the amaxes and scales, which slots index.
type placement struct{ align, lead int }

// newMomentShard uploads a random shard of recipe case rc for rule, with
// moments stored as mt and vt (FP8 in blocks of mb) and gradients of type
// gt, placed at at.
func newMomentShard(p *pair, r *rand.Rand, rc recipeCase, rule backend.Rule, mt, vt backend.MomentDType, mb int, gt buffer.DType, special bool, at placement) updateShard {
	block := 128
	if _, cols := rc.recipe.Block(); rc.recipe.LocalBlocks() {
		block = cols
	}
	l := randomLayout(r, rc.modes, block, at.align)
	master := values(r, l.n, 0.05, special)
	grad := values(r, l.n, 0.01, special)
	m := values(r, l.n, 0.01, false)
	v := values(r, l.n, 1e-4, false)
	for i := range v {
		v[i] = float32(math.Abs(float64(v[i])))
	}
	zeroRuns(r, master, grad, m, v)
	amax := make([]uint32, l.slots)
	scale := make([]float32, l.slots)
	for i := range scale {
		scale[i], _ = fp8.ScaleFromAmax(float32(r.Float64()*0.2), fp8.E4M3, 0, false)
	}
	seed, base := r.Uint32(), 4*r.IntN(1<<38) // bases are multiples of 4 (backend.UpdateArgs)
	mBuf := uploadMoment(p, "m", m, mt, mb, false, seed, base, at.lead)
	var vBuf momentBuf
	if rule == backend.RuleAdamW {
		vBuf = uploadMoment(p, "v", v, vt, mb, true, seed^1, base, at.lead)
	}
	hpType := rc.hp
	if hpType == 0 {
		hpType = buffer.Float32
	}
	ss := rc.recipe.ScaleType().Size()
	bs := []buf{
		p.uploadAfter("master", 4*at.lead, encode(master, buffer.Float32), float32s),
		p.uploadAfter("grad", gt.Size()*at.lead, encode(grad, gt), bytesExact),
		p.uploadAfter("fp8", at.lead, filled(l.n), bytesExact),
		p.upload("amax", u32s(amax), amaxKeys),
		p.upload("scale", encode(scale, buffer.Float32), bytesExact),
		p.uploadAfter("block scales", ss*at.lead, filled(ss*l.blocks), bytesExact),
		p.uploadAfter("hp", hpType.Size()*at.lead, filled(hpType.Size()*l.n), momentKind(hpType)),
	}
	a := backend.UpdateArgs{Rule: rule, N: l.n, MomentType: buffer.Float32, MType: mt, VType: vt, MomentBlock: mb,
		GradType: gt, Recipe: rc.recipe, Segments: l.segs, MomentSeed: seed, MomentBase: base,
		Hyper: backend.Hyper{GradScale: float32(0.5 + r.Float64()), Beta1: 0.9, Beta2: 0.999,
			OneMinusBeta1: float32(1 - 0.9), OneMinusBeta2: float32(1 - 0.999), Eps: 1e-8,
			SqrtVCorrection: float32(1 / math.Sqrt(1-math.Pow(0.999, float64(1+r.IntN(100))))), Momentum: 0.9}}
	for i := range a.Segments {
		a.Segments[i].WeightDecay = float32(r.Float64() * 0.01)
	}
	args := func(side int) *backend.UpdateArgs {
		b := a
		b.Master, b.Grad, b.FP8, b.Amax, b.Scale, b.BlockScales = bs[0].side(side), bs[1].side(side), bs[2].side(side), bs[3].side(side), bs[4].side(side), bs[5].side(side)
		if rc.hp != 0 {
			b.HP, b.HPType = bs[6].side(side), rc.hp
		}
		b.M, b.MScales, b.V, b.VScales = mBuf.data.side(side), mBuf.scales.side(side), vBuf.data.side(side), vBuf.scales.side(side)
		return &b
	}
	for _, x := range []buf{mBuf.data, mBuf.scales, vBuf.data, vBuf.scales} {
		if x.ref != nil {
			bs = append(bs, x)
		}
	}
	return updateShard{args: args, bufs: bs}
}
