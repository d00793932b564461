package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// mix32Model is murmur3's 32-bit finaliser (moments.cuh's mix32).
func mix32Model(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	x *= 0xc2b2ae35
	x ^= x >> 16
	return x
}

// dither4Model is a Go transcription of moments.cuh's dither4 and
// encode4_mom: the codes of the four scaled roots z at bucket positions
// pos..pos+3 (pos a multiple of 4) of a block whose amax key is k, from
// their raw bits (the kernel's shortcut for AbsBits), with one hash per
// pair of elements (pos/2 and pos/2 ^ 1).
func dither4Model(seed uint32, pos uint64, k uint32, z [4]float32) [4]uint8 {
	live := k < 0x7f800000
	x := seed ^ uint32(pos>>1) ^ uint32(pos>>33)*0xc2b2ae35
	var h0, h1, bias uint32
	if live {
		h0, h1, bias = mix32Model(x), mix32Model(x^1), 0x7fff8
	}
	r := [4]uint32{h0 << 4, h0 >> 12, h1 << 4, h1 >> 12}
	var c [4]uint8
	for j := range c {
		d := max(math.Float32bits(z[j]), 0x80000) + r[j]&0xffff0 - bias
		c[j] = fp8.E4M3.Encode(math.Float32frombits(d))
	}
	return c
}

// momentScaleModel is a Go transcription of moments.cuh's branch-free
// moment_scale.
func momentScaleModel(k uint32) (sc, inv float32) {
	c := 0
	if k&0x7fffff > 0x600000 {
		c = 1
	}
	s := min(135-int(k>>23)-c, 127)
	if k-1 >= 0x7f7fffff {
		return 1, 1
	}
	ib := uint32(127-s) << 23
	if s == 127 {
		ib = 0x00400000
	}
	return math.Float32frombits(uint32(s+127) << 23), math.Float32frombits(ib)
}

// TestDitherModel checks the kernel's form of the second moment's rounding
// against backend.EncodeMomentBlock, element by element: blocks of roots
// (never negative, as the kernel assumes) at positions that are multiples
// of 4, with the low half of pos/2 about to wrap, zeros, float32
// subnormals, E4M3 values, the values next to every rounding edge (bits
// 2^19 either side of an E4M3 value), and blocks with an Inf or NaN root
// (then rounded to nearest). The kernel scales z = y * scale first, as
// EncodeMomentBlock does.
func TestDitherModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 18))
	iters := 20000
	if testing.Short() {
		iters = 2000
	}
	for it := range iters {
		var y [4]float32
		e := r.IntN(60) - 40
		for j := range y {
			y[j] = float32(math.Ldexp(r.Float64(), e-r.IntN(8)))
			switch r.IntN(8) {
			case 0:
				y[j] = 0
			case 1:
				y[j] = math.Float32frombits(uint32(r.IntN(1 << 21))) // subnormal
			case 2: // next to a rounding edge once scaled (any scale: powers of two)
				b := math.Float32bits(float32(fp8.E4M3.Decode(uint8(r.IntN(0x7f))))) + uint32(r.IntN(1<<21)) - 1<<20
				y[j] = math.Float32frombits(b)
			}
		}
		if it%50 == 0 {
			y[r.IntN(4)] = []float32{float32(math.Inf(1)), float32(math.NaN())}[r.IntN(2)]
		}
		pos := (r.Uint64() >> uint(r.IntN(64))) &^ 3
		if it%4 == 0 { // the low half of pos/2 about to wrap
			pos = (pos&^0x1ffffffff | uint64(0x1ffffffff-r.IntN(8))) &^ 3
		}
		seed := r.Uint32()
		v := make([]float32, 4)
		var k uint32
		for j := range y {
			v[j] = y[j] * y[j] // EncodeMomentBlock takes v, roots it
			k = max(k, math.Float32bits(float32(math.Sqrt(float64(v[j])))))
		}
		want := make([]byte, 4)
		backend.EncodeMomentBlock(want, v, true, seed, pos)
		sc, _ := momentScaleModel(k)
		var z [4]float32
		for j := range z {
			z[j] = float32(math.Sqrt(float64(v[j]))) * sc
		}
		if got := dither4Model(seed, pos, k, z); [4]uint8(want) != got {
			t.Fatalf("roots %v at pos %#x seed %#x: kernel form %#v, reference %#v", y, pos, seed, got, want)
		}
	}
}

// TestMomentScaleModel checks the kernel's branch-free moment_scale against
// backend.MomentScale: every exponent with the mantissas around 1.75 and
// at the ends, zero, subnormals, Inf and NaN keys.
func TestMomentScaleModel(t *testing.T) {
	for e := uint32(0); e < 256; e++ {
		for _, m := range []uint32{0, 1, 2, 0x5fffff, 0x600000, 0x600001, 0x7ffffe, 0x7fffff} {
			k := e<<23 | m
			s, inv := momentScaleModel(k)
			ws, winv := backend.MomentScale(k)
			if math.Float32bits(s) != math.Float32bits(ws) || math.Float32bits(inv) != math.Float32bits(winv) {
				t.Fatalf("key %#08x: kernel form %g, %g; reference %g, %g", k, s, inv, ws, winv)
			}
		}
	}
}
