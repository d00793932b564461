package cpu_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"
)

// TestFP8MomentsClosedForm runs the CPU update with FP8 moments and checks
// every element against the closed form: the master is AdamWElem's (SGD:
// SGDElem's) of the decoded moments, bit for bit; the new moments decode to
// within E4M3's rounding (to nearest for m: 2^-4 relative, or half the
// subnormal step of the block's scale; stochastic for the root of v: less
// than a whole step) of the exact float32 moments; each block's scale_inv is the power of two that brings its amax
// into (224, 448]; elements and blocks outside the segments are untouched.
func TestFP8MomentsClosedForm(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, rule := range []backend.Rule{backend.RuleAdamW, backend.RuleSGD} {
		for _, mb := range backend.MomentBlocks {
			// segments at block starts, with a gap of whole blocks and a
			// partial last block
			segs := []backend.Segment{
				{Off: 0, Len: 3*mb + 5, Mode: backend.ModeHighPrecision, Factors: backend.Factors{StepSize: 1e-3, Shrink: 0.9999, WeightDecay: 0.01}},
				{Off: 6 * mb, Len: 20000, Mode: backend.ModeHighPrecision, Factors: backend.Factors{StepSize: 3e-3, Shrink: 1}},
			}
			n := 6*mb + 20000 + 7
			nb := (n + mb - 1) / mb
			master, grad := make([]float32, n), make([]float32, n)
			mOld, vOld := make([]float32, n), make([]float32, n)
			for i := range master {
				master[i] = float32(r.NormFloat64() * 0.05)
				grad[i] = float32(r.NormFloat64() * math.Ldexp(1, -r.IntN(12)))
				mOld[i] = float32(r.NormFloat64() * 1e-3)
				vOld[i] = float32(math.Abs(r.NormFloat64()) * 1e-6)
			}
			be := cpu.New(3)
			enc := func(x []float32, root bool) ([]byte, []float32) {
				codes, inv := make([]byte, n), make([]float32, nb)
				for k := range inv {
					inv[k] = backend.EncodeMomentBlock(codes[k*mb:min(k*mb+mb, n)], x[k*mb:min(k*mb+mb, n)], root, 7, uint64(k*mb))
				}
				return codes, inv
			}
			mc, mi := enc(mOld, false)
			vc, vi := enc(vOld, true)
			up := func(b []byte) buffer.Buffer {
				buf, err := be.Alloc(len(b))
				if err != nil {
					t.Fatal(err)
				}
				if err := be.Write(buf, 0, b); err != nil {
					t.Fatal(err)
				}
				return buf
			}
			h := backend.Hyper{GradScale: 0.75, Beta1: 0.9, Beta2: 0.999, OneMinusBeta1: float32(1 - 0.9), OneMinusBeta2: float32(1 - 0.999), Eps: 1e-8, SqrtVCorrection: 3.1, Momentum: 0.9}
			a := backend.UpdateArgs{Rule: rule, Hyper: h, N: n, MomentType: buffer.Float32, MType: backend.MomentFP8, MomentBlock: mb,
				Master: up(f32bytes(master)), M: up(mc), MScales: up(f32bytes(mi)), Grad: up(f32bytes(grad)), GradType: buffer.Float32,
				Segments: segs, HP: up(make([]byte, 4*n)), HPType: buffer.Float32}
			if rule == backend.RuleAdamW {
				a.VType, a.V, a.VScales = backend.MomentFP8, up(vc), up(f32bytes(vi))
			}
			if err := be.Update(&a); err != nil {
				t.Fatal(err)
			}
			gotP := bytesF32(read(t, be, a.Master))
			gotMC, gotMI := read(t, be, a.M), bytesF32(read(t, be, a.MScales))
			var gotVC []byte
			var gotVI []float32
			if a.V != nil {
				gotVC, gotVI = read(t, be, a.V), bytesF32(read(t, be, a.VScales))
			}
			inside := make([]*backend.Segment, n)
			for k := range segs {
				for i := segs[k].Off; i < segs[k].Off+segs[k].Len; i++ {
					inside[i] = &segs[k]
				}
			}
			blockAmax := make([]float64, 2*nb)
			for i := range n {
				s, b := inside[i], i/mb
				if s == nil {
					if gotMC[i] != mc[i] || gotP[i] != master[i] || (a.V != nil && gotVC[i] != vc[i]) {
						t.Fatalf("%v block %d: element %d outside the segments changed", rule, mb, i)
					}
					continue
				}
				m0 := backend.DecodeMoment(mc[i], mi[b], false)
				var p, m, v float32
				if rule == backend.RuleAdamW {
					p, m, v = backend.AdamWElem(master[i], m0, backend.DecodeMoment(vc[i], vi[b], true), grad[i], &h, s.StepSize, s.Shrink)
				} else {
					p, m = backend.SGDElem(master[i], m0, grad[i], &h, s.StepSize, s.WeightDecay)
				}
				if math.Float32bits(gotP[i]) != math.Float32bits(p) {
					t.Fatalf("%v block %d element %d: master %g, closed form %g", rule, mb, i, gotP[i], p)
				}
				if got := backend.DecodeMoment(gotMC[i], gotMI[b], false); !within(got, m, gotMI[b], false) {
					t.Fatalf("%v block %d element %d: m decodes to %g, exact %g", rule, mb, i, got, m)
				}
				blockAmax[2*b] = max(blockAmax[2*b], math.Abs(float64(m)))
				if a.V != nil {
					root := float32(math.Sqrt(float64(v)))
					got := float32(backend.MomentFormat.Decode(gotVC[i]) * gotVI[b])
					if !within(got, root, gotVI[b], true) {
						t.Fatalf("block %d element %d: sqrt(v) decodes to %g, exact %g", mb, i, got, root)
					}
					blockAmax[2*b+1] = max(blockAmax[2*b+1], float64(root))
				}
			}
			for b := range nb {
				for j, inv := range [][]float32{gotMI, gotVI} {
					if inv == nil || blockAmax[2*b+j] == 0 {
						continue
					}
					if s := blockAmax[2*b+j] / float64(inv[b]); s <= 224 || s > 448 {
						t.Fatalf("%v block %d: moment %d block %d has amax %g at scale_inv %g", rule, mb, j, b, blockAmax[2*b+j], inv[b])
					}
				}
			}
		}
	}
}

// within reports whether got is y to within E4M3's rounding under scale_inv
// inv: to nearest, or stochastic (sr: less than a whole unit).
func within(got, y, inv float32, sr bool) bool {
	d := math.Abs(float64(got) - float64(y))
	if sr {
		return d < math.Abs(float64(y))/8 || d < math.Ldexp(float64(inv), -9)
	}
	return d <= math.Abs(float64(y))/16 || d <= math.Ldexp(float64(inv), -10)
}

func f32bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

func read(t *testing.T, be backend.Backend, b buffer.Buffer) []byte {
	t.Helper()
	out := make([]byte, b.Len())
	if err := be.Read(out, b, 0); err != nil {
		t.Fatal(err)
	}
	return out
}
