package cpu_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/cpu"
)

// refShard is a shard held as plain Go slices: the reference's state, and
// the bytes the backend under test starts from.
type refShard struct {
	n           int
	mt, gt, hpt buffer.DType
	master      []float32
	m, v, grad  []uint32 // float32 bits, or bfloat16 bits in the low half
	fp8         []byte
	blockScales []byte // float32 (little endian) or E8M0 per block
	amax        []uint32
	scale       []float32
	hp          []uint32 // as m
}

// load and store read and write element i of a float32 or bfloat16 array
// held as bits.
func load(x []uint32, dt buffer.DType, i int) float32 {
	if dt == buffer.BFloat16 {
		return bf16.ToFloat32(uint16(x[i]))
	}
	return math.Float32frombits(x[i])
}

func store(x []uint32, dt buffer.DType, i int, f float32) {
	if dt == buffer.BFloat16 {
		x[i] = uint32(bf16.FromFloat32(f))
		return
	}
	x[i] = math.Float32bits(f)
}

// refUpdate is the straightforward reference of CPU.Update: the rule's
// Elem function element by element over each whole segment, then the fp8
// package's function for the segment's mode over the whole segment.
func refUpdate(s *refShard, a *backend.UpdateArgs) {
	for _, seg := range a.Segments {
		for i := seg.Off; i < seg.Off+seg.Len; i++ {
			switch a.Rule {
			case backend.RuleAdamW:
				p, m, v := backend.AdamWElem(s.master[i], load(s.m, s.mt, i), load(s.v, s.mt, i), load(s.grad, s.gt, i), &a.Hyper, seg.StepSize, seg.Shrink)
				s.master[i] = p
				store(s.m, s.mt, i, m)
				store(s.v, s.mt, i, v)
			case backend.RuleSGD:
				p, m := backend.SGDElem(s.master[i], load(s.m, s.mt, i), load(s.grad, s.gt, i), &a.Hyper, seg.StepSize, seg.WeightDecay)
				s.master[i] = p
				store(s.m, s.mt, i, m)
			}
		}
		src := s.master[seg.Off : seg.Off+seg.Len]
		switch seg.Mode {
		case backend.ModeHighPrecision:
			for i := seg.Off; i < seg.Off+seg.Len; i++ {
				store(s.hp, s.hpt, i, s.master[i])
			}
		case backend.ModeTensorCurrent:
			s.amax[seg.Slot] = max(s.amax[seg.Slot], math.Float32bits(fp8.Amax(src)))
		case backend.ModeTensorDelayed:
			am := fp8.CastScaled(s.fp8[seg.Off:], src, s.scale[seg.Slot], a.Recipe.Format)
			s.amax[seg.Slot] = max(s.amax[seg.Slot], math.Float32bits(am))
		case backend.ModeBlock:
			_, block := a.Recipe.Block()
			first := seg.Off / block
			if a.Recipe.Scaling == fp8.MXFP8 {
				fp8.CastMX(s.fp8[seg.Off:], s.blockScales[first:], src, a.Recipe.Format)
				break
			}
			inv := make([]float32, (seg.Len+block-1)/block)
			fp8.CastBlocks1D(s.fp8[seg.Off:], inv, src, block, a.Recipe.Format, a.Recipe.Margin, a.Recipe.PowerOf2)
			for k, x := range inv {
				binary.LittleEndian.PutUint32(s.blockScales[4*(first+k):], math.Float32bits(x))
			}
		case backend.ModeTile:
			tiles := make([]float32, len(s.amax)-seg.Slot)
			for k := range tiles {
				tiles[k] = math.Float32frombits(s.amax[seg.Slot+k])
			}
			fp8.TileAmax(tiles, src, seg.ParamOffset, seg.Cols, 128)
			for k, x := range tiles {
				s.amax[seg.Slot+k] = math.Float32bits(x)
			}
		}
	}
}

// refValue returns a float32 of scale sigma or, with probability special,
// one of: ±0, ±Inf, a NaN of random sign and payload, a subnormal, a huge
// value, a random bit pattern.
func refValue(r *rand.Rand, sigma, special float64) float32 {
	if r.Float64() >= special {
		return float32(r.NormFloat64() * sigma)
	}
	sign := uint32(r.IntN(2)) << 31
	switch r.IntN(6) {
	case 0:
		return math.Float32frombits(sign)
	case 1:
		return math.Float32frombits(sign | 0x7f800000)
	case 2:
		return math.Float32frombits(sign | 0x7f800000 | uint32(1+r.IntN(1<<23-1)))
	case 3:
		return math.Float32frombits(sign | uint32(1+r.IntN(1<<23-1)))
	case 4:
		return math.Float32frombits(sign | uint32(0x7e000000+r.IntN(0x800000*3)))
	}
	return math.Float32frombits(r.Uint32())
}

// refArray returns n elements of type dt as bits; bfloat16 specials are
// drawn as bfloat16 bit patterns so that NaN payloads survive.
func refArray(r *rand.Rand, n int, dt buffer.DType, sigma, special float64) []uint32 {
	x := make([]uint32, n)
	for i := range x {
		f := refValue(r, sigma, special)
		if dt == buffer.BFloat16 {
			if math.IsNaN(float64(f)) {
				x[i] = math.Float32bits(f) >> 16
				if x[i]&0x7f == 0 { // the payload was in the dropped half
					x[i] |= uint32(1 + r.IntN(0x7f))
				}
			} else {
				x[i] = uint32(bf16.FromFloat32(f))
			}
			continue
		}
		x[i] = math.Float32bits(f)
	}
	return x
}

// refLayout places segments of random modes and lengths over a shard with
// gaps between them; one segment spans several chunks of the backend.
func refLayout(r *rand.Rand, block int) (segs []backend.Segment, n, slots int) {
	modes := []backend.Mode{backend.ModeHighPrecision, backend.ModeTensorCurrent, backend.ModeTensorDelayed,
		backend.ModeBlock, backend.ModeTile}
	pos := r.IntN(17)
	long := r.IntN(8)
	for k := range 8 {
		mode := modes[r.IntN(len(modes))]
		if mode == backend.ModeBlock {
			pos = (pos + block - 1) / block * block
		}
		length := 1 + r.IntN(200)
		switch {
		case k == long:
			length = 2*(1<<16) + 1 + r.IntN(5000)
		case r.IntN(3) == 0:
			length = 1 + r.IntN(5000)
		}
		s := backend.Segment{Off: pos, Len: length, Mode: mode, Slot: slots,
			Factors: backend.Factors{StepSize: float32(r.Float64() * 1e-2), Shrink: float32(1 - r.Float64()*1e-3)}}
		switch mode {
		case backend.ModeTensorCurrent, backend.ModeTensorDelayed:
			slots++
		case backend.ModeTile:
			s.Cols = 1 + r.IntN(700)
			s.ParamOffset = r.IntN(200 * s.Cols)
			last := s.ParamOffset + length - 1
			slots += (last/s.Cols/128 + 1) * ((s.Cols + 127) / 128)
		}
		segs = append(segs, s)
		pos += length + r.IntN(3)*r.IntN(40)
	}
	return segs, pos + r.IntN(9), slots
}

// TestUpdateReference runs CPU.Update against refUpdate on random shards
// holding segments of every mode, for every rule, moment and gradient type,
// recipe with blocks and high-precision type, with and without special
// values (NaN payloads, infinities, signed zeros, subnormals, huge values),
// and compares every byte of every buffer, outside the segments included.
func TestUpdateReference(t *testing.T) {
	f32, bf16 := buffer.Float32, buffer.BFloat16
	type ruleCase struct {
		rule   backend.Rule
		mt, gt buffer.DType
	}
	rules := []ruleCase{{backend.RuleNone, f32, f32}}
	for _, rule := range []backend.Rule{backend.RuleAdamW, backend.RuleSGD} {
		for _, mt := range []buffer.DType{f32, bf16} {
			for _, gt := range []buffer.DType{f32, bf16} {
				rules = append(rules, ruleCase{rule, mt, gt})
			}
		}
	}
	recipes := []fp8.Recipe{
		{Format: fp8.E4M3, Scaling: fp8.Block1x128},
		{Format: fp8.E5M2, Scaling: fp8.Block1x128, Margin: 2, PowerOf2: true},
		{Format: fp8.E4M3, Scaling: fp8.MXFP8},
		{Format: fp8.E5M2, Scaling: fp8.MXFP8},
	}
	seed := uint64(0)
	for ri, rc := range recipes {
		for _, rule := range rules {
			for _, special := range []float64{0, 0.2} {
				seed++
				hpt := []buffer.DType{f32, bf16}[seed%2]
				workers := 1 + 2*int(seed/2%2)
				name := fmt.Sprintf("%v-%v/rule=%d/m=%v/g=%v/hp=%v/special=%v/workers=%d", rc.Format, rc.Scaling, rule.rule, rule.mt, rule.gt, hpt, special, workers)
				t.Run(name, func(t *testing.T) {
					r := rand.New(rand.NewPCG(seed, uint64(ri)))
					a, s := refCase(r, rc, rule.rule, rule.mt, rule.gt, hpt, special)
					checkAgainstReference(t, cpu.New(workers), a, s)
				})
			}
		}
	}
}

// refCase draws the arguments and the initial shard of one case.
func refCase(r *rand.Rand, rc fp8.Recipe, rule backend.Rule, mt, gt, hpt buffer.DType, special float64) (*backend.UpdateArgs, *refShard) {
	_, block := rc.Block()
	segs, n, slots := refLayout(r, block)
	if rule == backend.RuleSGD {
		for i := range segs {
			segs[i].WeightDecay = float32(r.Float64() * 1e-2)
		}
	}
	s := &refShard{n: n, mt: mt, gt: gt, hpt: hpt,
		m: refArray(r, n, mt, 0.01, special), v: refArray(r, n, mt, 1e-4, special),
		grad: refArray(r, n, gt, 0.01, special), hp: refArray(r, n, hpt, 1, 0.5),
		fp8: make([]byte, n), blockScales: make([]byte, 4*(n/block+1)),
		amax: make([]uint32, slots), scale: make([]float32, slots)}
	for _, x := range refArray(r, n, buffer.Float32, 0.05, special) {
		s.master = append(s.master, math.Float32frombits(x))
	}
	if special > 0 {
		for i := range s.grad {
			if r.IntN(50) == 0 { // gradients past the moments' range
				s.grad[i] = refArray(r, 1, gt, 1e25, 0)[0]
			}
		}
	}
	if special == 0 { // v >= 0: clear the sign bit
		sign := uint32(1) << (8*mt.Size() - 1)
		for i := range s.v {
			s.v[i] &^= sign
		}
	}
	for i := range s.fp8 {
		s.fp8[i] = byte(r.Uint32())
	}
	for i := range s.blockScales {
		s.blockScales[i] = byte(r.Uint32())
	}
	for k := range s.amax {
		if r.IntN(2) == 0 {
			s.amax[k] = math.Float32bits(float32(r.Float64() * 0.1))
		}
		s.scale[k], _ = fp8.ScaleFromAmax(float32(r.Float64()*0.2), rc.Format, 0, false)
	}
	h := backend.Hyper{GradScale: float32(0.5 + r.Float64()), Beta1: 0.9, Beta2: 0.999,
		OneMinusBeta1: float32(1 - 0.9), OneMinusBeta2: float32(1 - 0.999), Eps: 1e-8,
		SqrtVCorrection: float32(1 / math.Sqrt(1-math.Pow(0.999, float64(1+r.IntN(100))))), Momentum: 0.9}
	a := &backend.UpdateArgs{Rule: rule, Hyper: h, N: n, MomentType: mt, GradType: gt, Segments: segs,
		Recipe: rc, HPType: hpt}
	return a, s
}

// checkAgainstReference uploads s to be, runs a there and refUpdate on s,
// and compares every buffer byte for byte.
func checkAgainstReference(t *testing.T, be backend.Backend, a *backend.UpdateArgs, s *refShard) {
	t.Helper()
	type checked struct {
		name string
		dst  *buffer.Buffer
		enc  func() []byte
	}
	elems := func(x []uint32, dt buffer.DType) func() []byte {
		return func() []byte {
			b := make([]byte, dt.Size()*len(x))
			for i, w := range x {
				if dt == buffer.BFloat16 {
					binary.LittleEndian.PutUint16(b[2*i:], uint16(w))
				} else {
					binary.LittleEndian.PutUint32(b[4*i:], w)
				}
			}
			return b
		}
	}
	floats := func(x *[]float32) func() []byte {
		return func() []byte {
			w := make([]uint32, len(*x))
			for i, f := range *x {
				w[i] = math.Float32bits(f)
			}
			return elems(w, buffer.Float32)()
		}
	}
	bufs := []checked{
		{"master", &a.Master, floats(&s.master)},
		{"m", &a.M, elems(s.m, s.mt)},
		{"v", &a.V, elems(s.v, s.mt)},
		{"grad", &a.Grad, elems(s.grad, s.gt)},
		{"fp8", &a.FP8, func() []byte { return s.fp8 }},
		{"block scales", &a.BlockScales, func() []byte { return s.blockScales }},
		{"amax", &a.Amax, func() []byte { return elems(s.amax, buffer.Float32)() }},
		{"scale", &a.Scale, floats(&s.scale)},
		{"hp", &a.HP, elems(s.hp, s.hpt)},
	}
	for _, b := range bufs {
		init := b.enc()
		buf, err := be.Alloc(len(init))
		if err != nil {
			t.Fatal(err)
		}
		if err := be.Write(buf, 0, init); err != nil {
			t.Fatal(err)
		}
		*b.dst = buf
	}
	if err := be.Update(a); err != nil {
		t.Fatal(err)
	}
	refUpdate(s, a)
	for _, b := range bufs {
		want := b.enc()
		got := make([]byte, len(want))
		if err := be.Read(got, *b.dst, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			bad, first := 0, -1
			for i := range want {
				if got[i] != want[i] {
					bad++
					if first < 0 {
						first = i
					}
				}
			}
			lo := first &^ 3
			t.Errorf("%s: %d bytes differ; first at byte %d: got % x, want % x", b.name, bad, first,
				got[lo:min(lo+4, len(got))], want[lo:min(lo+4, len(want))])
		}
	}
}
