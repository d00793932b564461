package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// gsTraits mirrors GSTraits of gradstats.cu (the f32 window) and a
// configuration's U.
type gsTraits struct{ v, w, f, p, u int }

var gsF32 = gsTraits{v: 4, w: 22, f: 23, p: 128, u: 4}

// gsModel is a Go transcription of one thread of the float32 kernels
// (WindowF), run on the CPU: it checks the scheme of gradstats.cu (every
// float64 addition is exact, the flushes and the integer path add the right
// integers) apart from the GPU, on any input. Its limbs also serve the
// bfloat16 model (gsModelB).
type gsModel struct {
	tr             gsTraits
	t              *testing.T
	acc            [2]float64
	lo, hi         float32
	e              int
	hiBits         uint32
	below          int
	belowE         uint32
	bad            uint64
	limbs          [backend.NormLimbs]uint64
	fastAdds, move int
}

func newGSModel(t *testing.T, tr gsTraits) *gsModel { return &gsModel{tr: tr, t: t} }

func (m *gsModel) add(v uint64, bit int) {
	li, s := bit>>5, uint(bit&31)
	lo := v << s
	hi := uint64(0)
	if s > 0 {
		hi = v >> (64 - s)
	}
	m.limbs[li] += lo & 0xffffffff
	if li+1 < backend.NormLimbs {
		m.limbs[li+1] += lo >> 32
	} else if lo>>32 != 0 {
		m.t.Fatalf("flush piece beyond limb 8: v=%#x bit=%d", v, bit)
	}
	if hi != 0 {
		if li+2 >= backend.NormLimbs {
			m.t.Fatalf("flush piece beyond limb 8: v=%#x bit=%d", v, bit)
		}
		m.limbs[li+2] += hi
	}
}

func (m *gsModel) addSquare(b uint32) {
	e := b >> 23
	mant := uint64(b & 0x7fffff)
	if e != 0 {
		mant |= 0x800000
	} else {
		e = 1
	}
	m.add(mant, int(e)-1)
}

func (m *gsModel) flush() {
	x := m.e - 127 - m.tr.f
	for i, a := range m.acc {
		if a == 0 {
			continue
		}
		v := math.Ldexp(a, -x)
		if v != math.Trunc(v) || v >= 1<<53 {
			m.t.Fatalf("accumulator %g is not an integer below 2^53 of units 2^%d", a, x)
		}
		m.add(uint64(v), x+149)
		m.acc[i] = 0
	}
}

func (m *gsModel) setWindow(top int) {
	m.flush()
	m.e = min(max(top+4-m.tr.w, 1), 254)
	m.lo = math.Float32frombits(uint32(m.e) << 23)
	if m.e+m.tr.w >= 255 {
		m.hiBits = 0x7f800000
	} else {
		m.hiBits = uint32(m.e+m.tr.w) << 23
	}
	m.hi = math.Float32frombits(m.hiBits)
	m.below, m.belowE = 0, 0
	m.move++
}

func (m *gsModel) miss(b uint32) {
	be := b >> 23 & 0xff
	switch {
	case be == 0xff:
		m.bad++
		return
	case b == 0:
		return
	}
	m.addSquare(b)
	if b >= m.hiBits {
		m.setWindow(int(be))
		return
	}
	m.belowE = max(m.belowE, be)
	if m.below++; m.below >= 16 {
		m.setWindow(int(m.belowE))
	}
}

// fastAdd is add_if: the addition into an accumulator, checked exact.
func (m *gsModel) fastAdd(i int, q float32) bool {
	a := float32(0)
	if q >= m.lo && q < m.hi {
		a = q
	}
	s := m.acc[i] + float64(a)
	if s-m.acc[i] != float64(a) || s-float64(a) != m.acc[i] {
		m.t.Fatalf("inexact float64 addition %g + %g (window %d)", m.acc[i], a, m.e)
	}
	m.acc[i] = s
	if a != 0 {
		m.fastAdds++
	}
	return q != a
}

func (m *gsModel) period() {
	m.flush()
	for k := 0; k < backend.NormLimbs-1; k++ {
		m.limbs[k+1] += m.limbs[k] >> 32
		m.limbs[k] &= 0xffffffff
	}
	m.below, m.belowE = 0, 0
}

// run processes the vectors of one thread (iteration by iteration, U
// vectors each, V squares per vector) as the kernel does.
func (m *gsModel) run(iters [][][]float32) {
	vecs := 0
	for _, it := range iters {
		var missed []float32
		for _, vec := range it {
			for j, x := range vec {
				q := x * x
				if m.fastAdd(j&1, q) {
					missed = append(missed, q)
				}
			}
		}
		for _, q := range missed {
			m.miss(math.Float32bits(q))
		}
		if vecs += m.tr.u; vecs == m.tr.p {
			m.period()
			vecs = 0
		}
	}
	m.period()
}

// stats returns the model's limbs and count as int64 statistics.
func (m *gsModel) stats() [backend.StatsLen]int64 {
	var s [backend.StatsLen]int64
	for k, l := range m.limbs {
		s[k] = int64(l)
	}
	s[backend.NormLimbs] = int64(m.bad)
	return s
}

// threadModel is the model of one thread of a kernel: start sets the window
// on the thread's first element, run processes its iterations (U vectors
// each, V elements per vector), stats returns its limbs and count, counts
// the elements added by the fast path and the window moves.
type threadModel interface {
	start(x float32)
	run(iters [][][]float32)
	stats() [backend.StatsLen]int64
	counts() (fast, moves int)
}

func (m *gsModel) start(x float32) {
	if b := math.Float32bits(x * x); b != 0 && b>>23&0xff != 0xff {
		m.setWindow(int(b >> 23))
	}
}

func (m *gsModel) counts() (int, int) { return m.fastAdds, m.move }

// modelStats runs the model of the kernel (float32 with tr, bfloat16 when
// bf with tr.u vectors per iteration and window policy pol) over xs as a grid of the given number
// of threads would (vectors dealt round-robin, U per iteration; the head
// and tail of an unaligned slice do not matter to the scheme and are left
// out: xs is taken as aligned) and returns the normalised sum, the elements
// added by the fast path and the window moves.
func modelStats(t *testing.T, tr gsTraits, bf bool, pol gsbPolicy, xs []float32, threads int) ([backend.StatsLen]int64, int, int) {
	if bf {
		tr.v = 8
	}
	nv := len(xs) / tr.v
	var total [backend.StatsLen]int64
	fast, moves := 0, 0
	for th := range threads {
		var iters [][][]float32
		for i := th; i < nv; i += tr.u * threads {
			var it [][]float32
			for k := range tr.u {
				if j := i + k*threads; j < nv {
					it = append(it, xs[j*tr.v:(j+1)*tr.v])
				} else {
					it = append(it, make([]float32, tr.v))
				}
			}
			iters = append(iters, it)
		}
		var m threadModel = newGSModel(t, tr)
		if bf {
			m = newGSModelB(t, tr.u, pol)
		}
		if th < nv {
			m.start(xs[th*tr.v])
		}
		m.run(iters)
		for k, v := range m.stats() {
			total[k] += v
		}
		f, mv := m.counts()
		fast, moves = fast+f, moves+mv
	}
	var tail [backend.StatsLen]int64
	for _, x := range xs[nv*tr.v:] {
		backend.AddSquare(&tail, x)
	}
	for k := range tail {
		total[k] += tail[k]
	}
	backend.Normalize(&total)
	return total, fast, moves
}

// refStats is the specification: backend.AddSquare over xs, then
// backend.Normalize.
func refStats(xs []float32) [backend.StatsLen]int64 {
	var s [backend.StatsLen]int64
	for lo := 0; lo < len(xs); lo += 1 << 24 {
		for _, x := range xs[lo:min(lo+1<<24, len(xs))] {
			backend.AddSquare(&s, x)
		}
		backend.Normalize(&s)
	}
	backend.Normalize(&s)
	return s
}

// TestGradStatsModel checks the scheme of gradstats.cu on the CPU: the model
// of the kernel, run on every kind of input the GPU tests use, for every
// iteration width of the configurations, and on grids small enough that
// threads pass many flush periods, gives the reference sum, with every
// float64 addition the scheme keeps exact.
func TestGradStatsModel(t *testing.T) {
	for _, bf := range []bool{false, true} {
		for _, kind := range gradKinds {
			xs := kind.gen(rand.New(rand.NewPCG(7, uint64(len(kind.name)))), 1<<16+5, bf)
			want := refStats(xs)
			for _, c := range []struct {
				u   int
				pol gsbPolicy
			}{{2, gsbFirst}, {4, gsbFirst}, {8, gsbFirst}, {2, gsbRetry}, {4, gsbRetry}} {
				tr := gsF32
				tr.u = c.u
				if !bf && c.pol.retry {
					continue
				}
				for _, threads := range []int{1, 3, 64} {
					got, fast, moves := modelStats(t, tr, bf, c.pol, xs, threads)
					if got != want {
						t.Errorf("bf16=%v %s U=%d %+v threads=%d: model %v, reference %v", bf, kind.name, c.u, c.pol, threads, got, want)
					}
					if threads == 64 && c.u == 4 {
						t.Logf("bf16=%v %-10s retry=%-5v %5.1f%% of elements by the fast path, %d window moves", bf, kind.name, c.pol.retry, 100*float64(fast)/float64(len(xs)), moves)
					}
				}
			}
		}
	}
}

// TestGradStatsModelBF16Exhaustive runs the model on every bfloat16 value,
// each repeated over whole vectors, so that each is added by the fast path
// (or refused by it) and flushed: the fixed point of one square alone must
// be exact. Then each value after a vector of typical values, and each
// value with 1.0 (a window at its highest and lowest positions).
func TestGradStatsModelBF16Exhaustive(t *testing.T) {
	tr := gsF32
	typical := make([]float32, 8)
	for i := range typical {
		typical[i] = fp8.Float32FromBF16(fp8.BF16FromFloat32(float32(i+1) * 1e-3))
	}
	for h := range 1 << 16 {
		x := fp8.Float32FromBF16(uint16(h))
		for _, first := range [][]float32{nil, typical, {1}, {0x1p100}, {0x1p-60}} {
			xs := append([]float32(nil), first...)
			for len(xs) < 4*8 {
				xs = append(xs, x)
			}
			for _, pol := range []gsbPolicy{gsbFirst, gsbRetry} {
				got, _, _ := modelStats(t, tr, true, pol, xs, 1)
				if want := refStats(xs); got != want {
					t.Fatalf("bf16 %#04x after %v, %+v: model %v, reference %v", h, first, pol, got, want)
				}
			}
		}
	}
}

// gradKind is a family of test gradients.
type gradKind struct {
	name string
	gen  func(r *rand.Rand, n int, bf16 bool) []float32
}

// gradKinds are the gradients of the tests: typical (Gaussian), scaled
// tensors (up and down), every exponent (subnormals, squares past float32),
// random bit patterns (NaN and Inf included), magnitudes that alternate to
// defeat any window, sparse, and special values. For bf16 every value is
// rounded to bfloat16 (and so is exact in it).
var gradKinds = []gradKind{
	{"normal", func(r *rand.Rand, n int, bf bool) []float32 {
		return genWith(r, n, bf, func(i int) float32 { return float32(r.NormFloat64() * 1e-3) })
	}},
	{"scaledup", func(r *rand.Rand, n int, bf bool) []float32 {
		return genWith(r, n, bf, func(i int) float32 { return float32(r.NormFloat64() * math.Ldexp(1e-4, 16*i/n*3)) })
	}},
	{"scaleddown", func(r *rand.Rand, n int, bf bool) []float32 {
		return genWith(r, n, bf, func(i int) float32 { return float32(r.NormFloat64() * math.Ldexp(1e4, -16*i/n*3)) })
	}},
	{"exponents", func(r *rand.Rand, n int, bf bool) []float32 {
		return genWith(r, n, bf, func(i int) float32 {
			return math.Float32frombits(r.Uint32()&0x807fffff | uint32(r.IntN(255))<<23)
		})
	}},
	{"bits", func(r *rand.Rand, n int, bf bool) []float32 {
		return genWith(r, n, bf, func(i int) float32 { return math.Float32frombits(r.Uint32()) })
	}},
	{"alternate", func(r *rand.Rand, n int, bf bool) []float32 {
		return genWith(r, n, bf, func(i int) float32 {
			return float32(r.NormFloat64() * math.Ldexp(1, 40*(i%5)-90))
		})
	}},
	{"sparse", func(r *rand.Rand, n int, bf bool) []float32 {
		return genWith(r, n, bf, func(i int) float32 {
			if r.IntN(10) != 0 {
				return 0
			}
			return float32(r.NormFloat64())
		})
	}},
	{"edges", func(r *rand.Rand, n int, bf bool) []float32 {
		// exponents around the ends of the bfloat16 window (64, 171, 184,
		// 190, 191) and typical values, mixed.
		es := []int{63, 64, 65, 120, 170, 171, 172, 183, 184, 185, 189, 190, 191, 192, 254}
		return genWith(r, n, bf, func(i int) float32 {
			if r.IntN(4) == 0 {
				return float32(r.NormFloat64() * 1e-3)
			}
			return math.Float32frombits(r.Uint32()&0x807fffff | uint32(es[r.IntN(len(es))])<<23)
		})
	}},
	{"special", func(r *rand.Rand, n int, bf bool) []float32 {
		sp := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
			float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, math.Float32frombits(1),
			math.Float32frombits(0x807fffff), 0x1p-75, 0x1p-74, 0x1.fffffep63, 0x1p64, -0x1p64, 1.8446743e19,
			0x1p-63, 0x1p-64, 0x1p-126, 1, -1, 3}
		return genWith(r, n, bf, func(i int) float32 { return sp[r.IntN(len(sp))] })
	}},
}

// genWith returns n values of f, rounded to bfloat16 when bf.
func genWith(r *rand.Rand, n int, bf bool, f func(i int) float32) []float32 {
	xs := make([]float32, n)
	for i := range xs {
		x := f(i)
		if bf {
			x = fp8.Float32FromBF16(fp8.BF16FromFloat32(x))
		}
		xs[i] = x
	}
	return xs
}

// addStats adds two normalised statistics and normalises the sum.
func addStats(a, b [backend.StatsLen]int64) [backend.StatsLen]int64 {
	for k := range a {
		a[k] += b[k]
	}
	backend.Normalize(&a)
	return a
}
