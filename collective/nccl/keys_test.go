package nccl

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// The order keys of transform.cu, as a Go twin: the tests below check the
// specification against collective.Reduce; the GPU suite checks the
// kernels against collective.Reduce.

func key32(b uint32) uint32 {
	if b&0x7fffffff > 0x7f800000 {
		return 0xffffffff
	}
	if b&0x80000000 != 0 {
		return ^b
	}
	return b | 0x80000000
}

func unkey32(k uint32) uint32 {
	if k == 0xffffffff {
		return 0x7fc00000
	}
	if k&0x80000000 != 0 {
		return k & 0x7fffffff
	}
	return ^k
}

func key64(b uint64) uint64 {
	if b&(1<<63-1) > 0x7ff0000000000000 {
		return math.MaxUint64
	}
	if b&(1<<63) != 0 {
		return ^b
	}
	return b | 1<<63
}

func unkey64(k uint64) uint64 {
	if k == math.MaxUint64 {
		return 0x7ff8000000000000
	}
	if k&(1<<63) != 0 {
		return k & (1<<63 - 1)
	}
	return ^k
}

// TestKeysBF16 takes the maximum through keys of every bfloat16 value
// against a set of 600 others (60 with -short; specials and random patterns) and compares
// it with collective.Reduce's Max, bit for bit (any NaN for NaN).
func TestKeysBF16(t *testing.T) {
	others := []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x7f80, 0xff80, 0x7f7f, 0xff7f, 0x7fc0, 0xffc0, 0x7f81, 0xffff, 0x3f80, 0xbf80}
	rng := rand.New(rand.NewPCG(1, 2))
	want := 600
	if testing.Short() {
		want = 60
	}
	for len(others) < want {
		others = append(others, uint16(rng.Uint32()))
	}
	const n = 1 << 16
	a, b := make([]byte, 2*n), make([]byte, 2*n)
	ref := make([]byte, 2*n)
	for _, o := range others {
		for x := range n {
			binary.LittleEndian.PutUint16(a[2*x:], uint16(x))
			binary.LittleEndian.PutUint16(b[2*x:], o)
		}
		collective.Reduce(ref, [][]byte{a, b}, buffer.BFloat16, collective.Max)
		for x := range n {
			got := uint16(unkey32(max(key32(uint32(x)<<16), key32(uint32(o)<<16))) >> 16)
			w := binary.LittleEndian.Uint16(ref[2*x:])
			if got != w && !(isNaN16(got) && isNaN16(w)) {
				t.Fatalf("max(%#04x, %#04x) through keys = %#04x, Reduce gives %#04x", x, o, got, w)
			}
		}
	}
}

func isNaN16(h uint16) bool { return h&0x7fff > 0x7f80 }

// TestKeysRoundTrip checks that unkey inverts key on every value but NaN,
// and that key order is value order, for float32 and float64 samples.
func TestKeysRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1 << 20 {
		x, y := rng.Uint32(), rng.Uint32()
		fx, fy := math.Float32frombits(x), math.Float32frombits(y)
		if fx == fx && unkey32(key32(x)) != x {
			t.Fatalf("unkey32(key32(%#x)) = %#x", x, unkey32(key32(x)))
		}
		if fx == fx && fy == fy && fx < fy && key32(x) >= key32(y) {
			t.Fatalf("%v < %v but keys %#x >= %#x", fx, fy, key32(x), key32(y))
		}
		u, v := rng.Uint64(), rng.Uint64()
		du, dv := math.Float64frombits(u), math.Float64frombits(v)
		if du == du && unkey64(key64(u)) != u {
			t.Fatalf("unkey64(key64(%#x)) = %#x", u, unkey64(key64(u)))
		}
		if du == du && dv == dv && du < dv && key64(u) >= key64(v) {
			t.Fatalf("%v < %v but keys %#x >= %#x", du, dv, key64(u), key64(v))
		}
	}
	// NaN above +Inf, -0 below +0, canonical NaN back.
	if !(key32(0x7f800001) > key32(0x7f800000) && key32(0xffc00000) > key32(0x7f800000) && key32(0x80000000) < key32(0)) {
		t.Error("special keys out of order")
	}
	if unkey32(key32(0xffc00001)) != 0x7fc00000 || unkey64(key64(0xfff0000000000001)) != 0x7ff8000000000000 {
		t.Error("NaN does not come back canonical")
	}
}
