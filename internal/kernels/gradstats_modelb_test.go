package kernels

import (
	"math"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// gsModelB is a Go transcription of one thread of the bfloat16 kernels
// (WindowB of gradstats.cu), run on the CPU with the same float64
// operations (math.FMA for the fused multiply-add). Every iteration the
// scheme keeps and every addition of the slow path is checked exact (the
// product exact, then an error-free sum), and every flush an integer below
// 2^53: a failure is a hole in the proof of gradstats.cu's header.
type gsModelB struct {
	lm           *gsModel // limbs and the integer path
	u            int
	pol          gsbPolicy
	acc          [2]float64
	bound        float64
	kl           uint32
	a            int
	below        int
	belowE       uint32
	bad          uint64
	fastAdds     int
	moves, slows int
}

// gsbPolicy mirrors BPolicy of gradstats.cu.
type gsbPolicy struct {
	off, wx, up int
	retry       bool
}

var (
	gsbFirst = gsbPolicy{off: 11, wx: 14, up: 14}
	gsbRetry = gsbPolicy{off: 15, wx: 17, up: 18, retry: true}
)

const (
	gsbMisses = 16
	gsbAMin   = 64
	gsbAMax   = 171
)

func newGSModelB(t *testing.T, u int, pol gsbPolicy) *gsModelB {
	return &gsModelB{lm: newGSModel(t, gsF32), u: u, pol: pol, bound: 0x1p-1022}
}

// bvalue is WindowB::value: the float64 whose high word is hw.
func bvalue(hw uint32) float64 { return math.Float64frombits(uint64(hw) << 32) }

// fmaSquare is WindowB::fma_square; exact reports whether the addition was
// exact (the product d*(d*2^1023) a float64, and the sum error-free).
func fmaSquare(acc, d float64) (s float64, exact bool) {
	d2 := d * 0x1p1023
	p := d * d2
	s = math.FMA(d, d2, acc)
	if math.IsInf(p, 0) || math.IsNaN(p) || math.FMA(d, d2, -p) != 0 || s != acc+p {
		return s, false
	}
	bb := s - acc
	return s, (acc-(s-bb))+(p-bb) == 0
}

func (m *gsModelB) flush() {
	if m.a != 0 {
		x := 1037 - 2*m.a
		for _, a := range m.acc {
			if a == 0 {
				continue
			}
			v := math.Ldexp(a, x)
			if v != math.Trunc(v) || v >= 1<<53 {
				m.lm.t.Fatalf("accumulator %g is not an integer below 2^53 of units 2^%d (A=%d)", a, -x, m.a)
			}
			m.lm.add(uint64(v), 2*m.a-119)
		}
	}
	m.acc = [2]float64{}
}

func (m *gsModelB) bottom(top int) int { return min(max(top-m.pol.off, gsbAMin), gsbAMax) }

func (m *gsModelB) move(top int) {
	m.flush()
	m.a = m.bottom(top)
	m.kl = (0x8000 - uint32(m.a)<<7) * 0x10001
	m.bound = math.Ldexp(1, 2*m.a-984)
	m.below, m.belowE = 0, 0
	m.moves++
}

func (m *gsModelB) start(x float32) {
	h := uint32(fp8.BF16FromFloat32(x))
	if e := h >> 7 & 0xff; h&0x7fff != 0 && e != 0xff {
		m.move(int(e))
	}
}

// one is WindowB::one, the slow path of element h into accumulator i.
func (m *gsModelB) one(i int, h uint32) {
	mag := h & 0x7fff
	if mag == 0 {
		return
	}
	e := int(mag >> 7)
	if m.a != 0 && e >= m.a && e < m.a+m.pol.wx {
		s, exact := fmaSquare(m.acc[i], bvalue(mag<<13))
		if !exact {
			m.lm.t.Fatalf("inexact slow-path addition of bfloat16 %#04x (A=%d, acc %g)", h, m.a, m.acc[i])
		}
		m.acc[i] = s
		return
	}
	x := math.Float32frombits(h << 16)
	b := math.Float32bits(x * x)
	if b>>23&0xff == 0xff {
		m.bad++
		return
	}
	if b != 0 {
		m.lm.addSquare(b)
	}
	if e >= m.a+m.pol.up {
		m.move(e)
	} else {
		m.belowE = max(m.belowE, uint32(e))
		if m.below++; m.below >= gsbMisses {
			m.move(int(m.belowE))
		}
	}
}

// words returns the iteration's elements as the kernel's 32-bit words (two
// bfloat16 each, the even element in the low half).
func (m *gsModelB) words(it [][]float32) []uint32 {
	var ws []uint32
	for _, vec := range it {
		for j := 0; j < len(vec); j += 2 {
			ws = append(ws, uint32(fp8.BF16FromFloat32(vec[j]))|uint32(fp8.BF16FromFloat32(vec[j+1]))<<16)
		}
	}
	return ws
}

// iteration is WindowB::iteration.
func (m *gsModelB) iteration(it [][]float32) {
	ws := m.words(it)
	saved := m.acc
	low := uint32(0)
	exact := true
	for _, w := range ws {
		mag := w & 0x7fff7fff
		low |= (mag + 0x7fff7fff) &^ (mag + m.kl)
		var ok0, ok1 bool
		m.acc[0], ok0 = fmaSquare(m.acc[0], bvalue(w<<13&0x0fffe000))
		m.acc[1], ok1 = fmaSquare(m.acc[1], bvalue(w>>3&0x0fffe000))
		exact = exact && ok0 && ok1
	}
	if low&0x80008000 == 0 && m.acc[0] < m.bound && m.acc[1] < m.bound {
		if !exact {
			m.lm.t.Fatalf("kept an iteration with an inexact addition (A=%d): %#x", m.a, ws)
		}
		m.fastAdds += 2 * len(ws)
		if m.acc[0] >= 0.5*m.bound || m.acc[1] >= 0.5*m.bound {
			m.flush()
		}
		return
	}
	m.acc = saved
	m.slows++
	if m.pol.retry {
		t := uint32(0)
		for _, w := range ws {
			t = max(t, w>>7&0xff, w>>23&0xff)
		}
		if t != 0 && t <= 190 && m.bottom(int(t)) != m.a {
			m.move(int(t))
		}
	}
	for _, w := range ws {
		m.one(0, w&0xffff)
		m.one(1, w>>16)
	}
	if m.acc[0] >= 0.5*m.bound || m.acc[1] >= 0.5*m.bound {
		m.flush()
	}
}

func (m *gsModelB) period() {
	m.flush()
	m.lm.period()
	m.below, m.belowE = 0, 0
}

func (m *gsModelB) run(iters [][][]float32) {
	vecs := 0
	for _, it := range iters {
		m.iteration(it)
		if vecs += m.u; vecs >= 256 {
			m.period()
			vecs = 0
		}
	}
	m.period()
}

func (m *gsModelB) stats() [backend.StatsLen]int64 {
	s := m.lm.stats()
	s[backend.NormLimbs] = int64(m.bad)
	return s
}

func (m *gsModelB) counts() (int, int) { return m.fastAdds, m.moves }
