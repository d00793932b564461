package collective

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/distopt/distopt/buffer"
)

// The references below compute every result a second way: float32 steps in
// float64 arithmetic (double rounding is innocuous for +, / when 53 >=
// 2*24+2), float64 steps with math/big, bfloat16 rounding by choosing the
// nearer of the two neighbouring bfloat16 values, Max by folding math.Max.

func refAdd64(s, x float64) float64 {
	if math.IsNaN(s) || math.IsNaN(x) || math.IsInf(s, 0) || math.IsInf(x, 0) {
		return s + x // IEEE rules for non-finite operands
	}
	sum := new(big.Float).SetPrec(2100).SetFloat64(s)
	sum.Add(sum, new(big.Float).SetFloat64(x))
	f, _ := sum.Float64()
	if f == 0 {
		// An exact zero sum is +0, except -0 + -0.
		if math.Signbit(s) && math.Signbit(x) {
			return math.Copysign(0, -1)
		}
		return 0
	}
	return f
}

func refDiv64(s float64, n int) float64 {
	if math.IsNaN(s) || math.IsInf(s, 0) || s == 0 {
		return s / float64(n)
	}
	q := new(big.Float).SetPrec(200).SetFloat64(s)
	q.Quo(q, new(big.Float).SetInt64(int64(n)))
	f, _ := q.Float64()
	return f
}

// refBF16 rounds x to bfloat16 by comparing distances to its neighbours.
func refBF16(x float32) uint16 {
	if x != x {
		return 0x7fff
	}
	b := math.Float32bits(x)
	lo := uint16(b >> 16)
	if b&0xffff == 0 {
		return lo
	}
	hi := lo + 1 // next bfloat16 away from zero
	val := func(h uint16) float64 {
		if h&0x7fff == 0x7f80 {
			return math.Copysign(math.Ldexp(1, 128), float64(x))
		}
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	dl, dh := math.Abs(float64(x)-val(lo)), math.Abs(val(hi)-float64(x))
	switch {
	case dl < dh:
		return lo
	case dh < dl:
		return hi
	case lo&1 == 0:
		return lo
	}
	return hi
}

// refFloat reduces float64 values (exact copies of the inputs) in the
// precision of dt and returns the bits of the result in dt.
func refFloat(xs []float64, dt buffer.DType, op ReduceOp) uint64 {
	var s float64
	if op == Max {
		// math.Max gives +Inf for (+Inf, NaN): NaN is checked apart.
		s = xs[0]
		for _, x := range xs[1:] {
			s = math.Max(s, x)
		}
		for _, x := range xs {
			if math.IsNaN(x) {
				s = x
			}
		}
	} else {
		s = xs[0]
		for _, x := range xs[1:] {
			if dt == buffer.Float64 {
				s = refAdd64(s, x)
			} else {
				s = float64(float32(s + x))
			}
		}
		if op == Avg {
			if dt == buffer.Float64 {
				s = refDiv64(s, len(xs))
			} else {
				s = float64(float32(s / float64(len(xs))))
			}
		}
	}
	switch dt {
	case buffer.BFloat16:
		return uint64(refBF16(float32(s)))
	case buffer.Float32:
		if s != s {
			return uint64(CanonicalNaN32)
		}
		return uint64(math.Float32bits(float32(s)))
	}
	if s != s {
		return CanonicalNaN64
	}
	return math.Float64bits(s)
}

func refInt(xs []uint64, dt buffer.DType, op ReduceOp) uint64 {
	mask := uint64(1)<<(8*dt.Size()) - 1
	if dt == buffer.Int64 {
		mask = math.MaxUint64
	}
	s := xs[0]
	for _, x := range xs[1:] {
		switch {
		case op == Sum:
			s += x
		case dt == buffer.Int64 && int64(x) > int64(s), dt != buffer.Int64 && x > s:
			s = x
		}
	}
	return s & mask
}

func asFloat64(bits uint64, dt buffer.DType) float64 {
	switch dt {
	case buffer.BFloat16:
		return float64(math.Float32frombits(uint32(bits) << 16))
	case buffer.Float32:
		return float64(math.Float32frombits(uint32(bits)))
	}
	return math.Float64frombits(bits)
}

// randomBits returns an element of dt: random bits, or for floating point
// often a special value (NaN with a payload, ±Inf, ±0, the largest finite,
// subnormals) or a small integer, so that sums round, cancel and overflow.
func randomBits(rng *rand.Rand, dt buffer.DType) uint64 {
	w := 8 * uint(dt.Size())
	bits := rng.Uint64() >> (64 - w)
	if dt == buffer.Uint8 || dt == buffer.Uint32 || dt == buffer.Int64 {
		return bits
	}
	var x float64
	switch rng.IntN(12) {
	case 0:
		x = math.NaN()
		if dt == buffer.BFloat16 {
			return 0x7f81 | bits&0x8000
		}
		if dt == buffer.Float32 {
			return uint64(0x7f800001 | uint32(bits)&0x803fffff)
		}
		return 0x7ff0000000000001 | bits&0x800fffffffffffff
	case 1:
		x = math.Inf(1 - 2*rng.IntN(2))
	case 2:
		x = math.Copysign(0, float64(1-2*rng.IntN(2)))
	case 3:
		switch dt {
		case buffer.BFloat16:
			return 0x7f7f | bits&0x8000
		case buffer.Float32:
			return uint64(math.Float32bits(math.MaxFloat32) | uint32(bits)&0x80000000)
		}
		return math.Float64bits(math.MaxFloat64) | bits&(1<<63)
	case 4:
		return bits & (1<<(w-9) - 1) // a subnormal or small normal
	case 5, 6:
		x = float64(rng.IntN(200) - 100)
	default:
		return bits
	}
	switch dt {
	case buffer.BFloat16:
		return uint64(math.Float32bits(float32(x)) >> 16)
	case buffer.Float32:
		return uint64(math.Float32bits(float32(x)))
	}
	return math.Float64bits(x)
}

func TestReduceAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []buffer.DType{buffer.Uint8, buffer.BFloat16, buffer.Float32, buffer.Float64, buffer.Uint32, buffer.Int64} {
		for _, op := range []ReduceOp{Sum, Avg, Max} {
			isFloat := dt == buffer.BFloat16 || dt == buffer.Float32 || dt == buffer.Float64
			if op == Avg && !isFloat {
				continue
			}
			for _, n := range []int{1, 2, 3, 7, 8} {
				t.Run(fmt.Sprintf("%s/%s/n=%d", dt, op, n), func(t *testing.T) {
					const count = 1500 // several blocks and a partial one
					srcs := make([][]byte, n)
					for r := range srcs {
						srcs[r] = make([]byte, count*dt.Size())
						for i := range count {
							SetElementBits(srcs[r], dt, i, randomBits(rng, dt))
						}
					}
					dst := make([]byte, count*dt.Size())
					Reduce(dst, srcs, dt, op)
					for i := range count {
						var want uint64
						if isFloat {
							xs := make([]float64, n)
							for r := range xs {
								xs[r] = asFloat64(ElementBits(srcs[r], dt, i), dt)
							}
							want = refFloat(xs, dt, op)
						} else {
							xs := make([]uint64, n)
							for r := range xs {
								xs[r] = ElementBits(srcs[r], dt, i)
							}
							want = refInt(xs, dt, op)
						}
						if got := ElementBits(dst, dt, i); got != want {
							t.Fatalf("element %d: got %#x, want %#x", i, got, want)
						}
					}
					// In place on the last source gives the same bytes.
					Reduce(srcs[n-1], srcs, dt, op)
					if string(srcs[n-1]) != string(dst) {
						t.Fatal("in-place result differs")
					}
				})
			}
		}
	}
}

// TestReduceBF16PairSweep adds every bfloat16 to a sample of others.
func TestReduceBF16PairSweep(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	a := make([]byte, 2<<16)
	for i := range 1 << 16 {
		SetElementBits(a, buffer.BFloat16, i, uint64(i))
	}
	b, dst := make([]byte, len(a)), make([]byte, len(a))
	for range 8 {
		for i := range 1 << 16 {
			SetElementBits(b, buffer.BFloat16, i, uint64(rng.Uint32()&0xffff))
		}
		for _, op := range []ReduceOp{Sum, Avg, Max} {
			Reduce(dst, [][]byte{a, b}, buffer.BFloat16, op)
			for i := range 1 << 16 {
				xs := []float64{asFloat64(ElementBits(a, buffer.BFloat16, i), buffer.BFloat16), asFloat64(ElementBits(b, buffer.BFloat16, i), buffer.BFloat16)}
				if got, want := ElementBits(dst, buffer.BFloat16, i), refFloat(xs, buffer.BFloat16, op); got != want {
					t.Fatalf("%s(%#04x, %#04x) = %#04x, want %#04x", op, i, ElementBits(b, buffer.BFloat16, i), got, want)
				}
			}
		}
	}
}

func TestReduceSpecialCases(t *testing.T) {
	f32 := func(xs ...float32) [][]byte {
		out := make([][]byte, len(xs))
		for i, x := range xs {
			out[i] = ToBytes([]float32{x})
		}
		return out
	}
	negZero := float32(math.Copysign(0, -1))
	inf := float32(math.Inf(1))
	tests := []struct {
		name string
		srcs [][]byte
		op   ReduceOp
		want uint32
	}{
		{"max +0 -0", f32(0, negZero), Max, 0},
		{"max -0 +0", f32(negZero, 0), Max, 0},
		{"max -0 -0", f32(negZero, negZero), Max, 0x80000000},
		{"max NaN last", f32(1, inf, float32(math.NaN())), Max, CanonicalNaN32},
		{"sum -0 -0", f32(negZero, negZero), Sum, 0x80000000},
		{"sum -0 +0", f32(negZero, 0), Sum, 0},
		{"sum inf -inf", f32(inf, -inf), Sum, CanonicalNaN32},
		{"sum overflow", f32(math.MaxFloat32, math.MaxFloat32), Sum, 0x7f800000},
		{"sum order", f32(1<<24, 1, 1), Sum, math.Float32bits(1 << 24)},
		{"avg n=3", f32(1, 1, 2), Avg, math.Float32bits(float32(4) / 3)},
		{"avg overflow", f32(math.MaxFloat32, math.MaxFloat32), Avg, 0x7f800000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]byte, 4)
			Reduce(dst, tc.srcs, buffer.Float32, tc.op)
			if got := binary.LittleEndian.Uint32(dst); got != tc.want {
				t.Errorf("got %#08x, want %#08x", got, tc.want)
			}
		})
	}
}

func TestReducePanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
	}{
		{"no sources", func() { Reduce(nil, nil, buffer.Float32, Sum) }},
		{"length", func() { Reduce(make([]byte, 4), [][]byte{make([]byte, 8)}, buffer.Float32, Sum) }},
		{"partial element", func() { Reduce(make([]byte, 6), [][]byte{make([]byte, 6)}, buffer.Float32, Sum) }},
		{"avg on integers", func() { Reduce(make([]byte, 4), [][]byte{make([]byte, 4)}, buffer.Uint32, Avg) }},
		{"unknown op", func() { Reduce(make([]byte, 4), [][]byte{make([]byte, 4)}, buffer.Uint32, 0) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tc.f()
		})
	}
}

func TestBytesRoundTrip(t *testing.T) {
	x := []float32{1, -2.5, float32(math.Inf(-1)), math.Float32frombits(0x7f800123)}
	b := ToBytes(x)
	if got := binary.LittleEndian.Uint32(b[4:]); got != math.Float32bits(-2.5) {
		t.Errorf("element 1 bits %#x", got)
	}
	y := FromBytes[float32](b)
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			t.Errorf("element %d: %#x != %#x (NaN payload must be kept)", i, math.Float32bits(y[i]), math.Float32bits(x[i]))
		}
	}
	h := FromBytes[uint16](ToBytes([]uint16{0x3f80, 0xffff}))
	if h[0] != 0x3f80 || h[1] != 0xffff {
		t.Errorf("uint16 round trip: %#x", h)
	}
	i := FromBytes[int64](ToBytes([]int64{-1, math.MinInt64}))
	if i[0] != -1 || i[1] != math.MinInt64 {
		t.Errorf("int64 round trip: %d", i)
	}
}

// edgeBits are bfloat16 and float32 values whose sums round across a
// boundary: the largest finite bfloat16 plus half its ulp ties and rounds
// to Inf (to even), one step less stays finite; the same for float32; and
// subnormals whose sum is normal.
var edgeBits = map[buffer.DType][]uint64{
	buffer.BFloat16: {0x7f7f, 0x7b00, 0x7aff, 0xff7f, 0xfb00, 0xfaff, 0x7f7e, 0x0040, 0x003f, 0x8001, 0x7f80, 0x7fc1, 0xffff},
	buffer.Float32:  {0x7f7fffff, 0x73000000, 0x72ffffff, 0xff7fffff, 0xf3000000, 0x00400000, 0x003fffff, 0x80000001, 0x7f800001, 0xffc00000},
}

// layoutBits is randomBits with, one time in eight, a value of edgeBits.
func layoutBits(rng *rand.Rand, dt buffer.DType) uint64 {
	if e := edgeBits[dt]; len(e) > 0 && rng.IntN(8) == 0 {
		return e[rng.IntN(len(e))]
	}
	return randomBits(rng, dt)
}

// placed returns a slice of count elements of dt with element i set to
// bits[i], starting offset bytes past an 8-byte aligned start, inside a
// buffer whose other bytes (a guard band on both sides) are 0xa5; check
// reports whether the guard bands are intact.
func placed(bits []uint64, dt buffer.DType, offset int) (b []byte, check func() bool) {
	const guard = 16
	words := make([]uint64, (2*guard+offset+len(bits)*dt.Size())/8+1)
	all := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*len(words))
	for i := range all {
		all[i] = 0xa5
	}
	lo, hi := guard+offset, guard+offset+len(bits)*dt.Size()
	b = all[lo:hi:hi]
	for i, v := range bits {
		SetElementBits(b, dt, i, v)
	}
	return b, func() bool {
		for _, c := range append(all[:lo:lo], all[hi:]...) {
			if c != 0xa5 {
				return false
			}
		}
		return true
	}
}

// TestReduceLayouts checks Reduce against the references on operands at
// every alignment, in place on each kind of source, with the machine's byte
// order and with the portable path that decodes every element.
func TestReduceLayouts(t *testing.T) {
	const count = 2*reduceBlock + 37 // two whole blocks and a partial one
	rng := rand.New(rand.NewPCG(5, 6))
	type layout struct {
		name    string
		offsets func(r int) int // byte offset of source r, r = -1 for dst
		inPlace int             // dst is srcs[inPlace], or -1
	}
	layouts := []layout{
		{"aligned", func(int) int { return 0 }, -1},
		{"offset-dst", func(r int) int { return min(0, r) * -3 }, -1},
		{"offset-srcs", func(r int) int { return max(0, r%3+1) }, -1},
		{"offset-all", func(r int) int { return (r+5)%3 + 1 }, -1},
		{"in-place-first", func(int) int { return 0 }, 0},
		{"in-place-last", func(int) int { return 0 }, -2},
		{"in-place-middle-offset", func(r int) int { return (r + 2) % 4 }, 1},
	}
	for _, dt := range []buffer.DType{buffer.Uint8, buffer.BFloat16, buffer.Float32, buffer.Float64, buffer.Uint32, buffer.Int64} {
		isFloat := dt == buffer.BFloat16 || dt == buffer.Float32 || dt == buffer.Float64
		for _, op := range []ReduceOp{Sum, Avg, Max} {
			if op == Avg && !isFloat {
				continue
			}
			for _, n := range []int{1, 2, 3, 5, 8} {
				in := make([][]uint64, n)
				for r := range in {
					in[r] = make([]uint64, count)
					for i := range in[r] {
						in[r][i] = layoutBits(rng, dt)
					}
				}
				want := make([]uint64, count)
				for i := range want {
					xs, fs := make([]uint64, n), make([]float64, n)
					for r := range n {
						xs[r], fs[r] = in[r][i], asFloat64(in[r][i], dt)
					}
					if isFloat {
						want[i] = refFloat(fs, dt, op)
					} else {
						want[i] = refInt(xs, dt, op)
					}
				}
				for _, l := range layouts {
					for _, native := range []bool{true, false} {
						if native && !littleEndian {
							continue
						}
						name := fmt.Sprintf("%s/%s/n=%d/%s/native=%v", dt, op, n, l.name, native)
						t.Run(name, func(t *testing.T) {
							srcs := make([][]byte, n)
							checks := make([]func() bool, n+1)
							for r := range srcs {
								srcs[r], checks[r] = placed(in[r], dt, l.offsets(r))
							}
							var dst []byte
							switch {
							case l.inPlace == -2:
								dst, checks[n] = srcs[n-1], checks[n-1]
							case l.inPlace >= 0 && l.inPlace < n:
								dst, checks[n] = srcs[l.inPlace], checks[l.inPlace]
							default:
								dst, checks[n] = placed(make([]uint64, count), dt, l.offsets(-1))
							}
							if native {
								Reduce(dst, srcs, dt, op)
							} else {
								reduce(dst, srcs, dt, op, false)
							}
							for i, w := range want {
								if got := ElementBits(dst, dt, i); got != w {
									t.Fatalf("element %d of %v: got %#x, want %#x", i, column(in, i), got, w)
								}
							}
							for r, s := range srcs {
								if len(dst) > 0 && &s[0] == &dst[0] {
									continue
								}
								for i, v := range in[r] {
									if ElementBits(s, dt, i) != v {
										t.Fatalf("source %d element %d changed", r, i)
									}
								}
							}
							for r, ok := range checks {
								if !ok() {
									t.Fatalf("bytes written outside operand %d", r)
								}
							}
						})
					}
				}
			}
		}
	}
}

// column returns element i of every source, for messages.
func column(in [][]uint64, i int) []string {
	out := make([]string, len(in))
	for r := range in {
		out[r] = fmt.Sprintf("%#x", in[r][i])
	}
	return out
}
