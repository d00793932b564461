package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/optimizer/backend"
)

// encodeSRModel is a Go transcription of moments.cuh's encode_sr: the
// carry-and-shift form for 2^-6 <= |z| < Inf, the reference's steps
// (encode_sr_slow, backend.EncodeSR) for the rest.
func encodeSRModel(z float32, rnd uint32) uint8 {
	b := math.Float32bits(z)
	a := b & 0x7fffffff
	if a-0x3c800000 < 0x7f800000-0x3c800000 {
		return uint8(min((a+(^rnd>>12))>>20-0x3c0, 0x7e) | (b>>24)&0x80)
	}
	return backend.EncodeSR(z, rnd)
}

// momentHashModel is a Go transcription of mom_store's random bits of the
// four elements from pos: moment_hash(seed, pos+j) with the product of the
// high half taken once.
func momentHashModel(seed uint32, pos uint64) [4]uint32 {
	lo, hc := uint32(pos), uint32(pos>>32)*0xc2b2ae35
	var r [4]uint32
	for j := range r {
		l := lo + uint32(j)
		h := hc
		if l < lo {
			h += 0xc2b2ae35
		}
		x := seed ^ l ^ h
		x ^= x >> 16
		x *= 0x85ebca6b
		x ^= x >> 13
		x *= 0xc2b2ae35
		x ^= x >> 16
		r[j] = x
	}
	return r
}

// TestEncodeSRModel checks the kernel's form of stochastic rounding against
// backend.EncodeSR: every float32 of E4M3's normal binades and the ones
// above them (and every other class: zeros, subnormals, Inf, NaN, both
// signs) on a lattice of significands that includes the ends of each
// rounding interval, each against random bits that straddle the rounding
// threshold (the fraction's top 20 bits, and one either side) as well as
// uniform ones.
func TestEncodeSRModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 18))
	step := uint32(1 << 9)
	if testing.Short() {
		step = 1 << 13
	}
	bad := 0
	check := func(z float32, rnd uint32) {
		if got, want := encodeSRModel(z, rnd), backend.EncodeSR(z, rnd); got != want && bad < 10 {
			bad++
			t.Errorf("EncodeSR(%g = %#08x, rnd %#08x): kernel form %#02x, reference %#02x", z, math.Float32bits(z), rnd, got, want)
		}
	}
	for e := uint32(0); e < 256; e++ {
		for _, sign := range []uint32{0, 0x80000000} {
			// the lattice, plus the significands next to each rounding edge
			// (fraction 0 and all ones within the 20 low bits)
			for m := uint32(0); m < 1<<23; m += step {
				for _, mm := range []uint32{m, m | 0xfffff, m &^ 0xfffff, (m &^ 0xfffff) + 1, m + uint32(r.IntN(int(step)))} {
					z := math.Float32frombits(sign | e<<23 | mm&0x7fffff)
					f := mm & 0xfffff
					check(z, r.Uint32())
					for _, d := range []int64{-1, 0, 1} {
						if R := int64(f) + d; R >= 0 && R < 1<<20 {
							check(z, uint32(R)<<12|uint32(r.IntN(1<<12)))
						}
					}
				}
			}
		}
	}
	for _, rnd := range []uint32{0, 1, 0xfff, 0x1000, 0x7fffffff, 0xfffff000, 0xffffffff} {
		for _, z := range []float32{0, float32(math.Copysign(0, -1)), 448, 464, 480, 1e30, math.MaxFloat32,
			float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0x1p-6, 0x1p-7, 0x1p-9, 0x1p-10, 0x1p-126, 0x1p-149} {
			check(z, rnd)
			check(-z, rnd)
		}
	}
}

// TestMomentHashModel checks the kernel's hashes of four consecutive
// positions against backend.MomentHash, across the wrap of the low half.
func TestMomentHashModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for it := range 100000 {
		pos := r.Uint64() >> uint(r.IntN(64))
		if it%4 == 0 { // the low half about to wrap
			pos = pos&^0xffffffff | uint64(0xffffffff-r.IntN(5))
		}
		seed := r.Uint32()
		got := momentHashModel(seed, pos)
		for j, g := range got {
			if want := backend.MomentHash(seed, pos+uint64(j)); g != want {
				t.Fatalf("hash of (seed %#x, pos %#x + %d): kernel form %#x, reference %#x", seed, pos, j, g, want)
			}
		}
	}
}
