package backend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/fp8"
)

// quantBound reports whether the decoded value got (of stored value y, the
// moment or its root) is within E4M3's rounding of y under scale_inv inv:
// to nearest (sr false), half a unit in the last of 3 mantissa bits (2^-4
// relative) for normal codes, half the subnormal step (2^-10 * inv) below
// them; stochastic (sr, EncodeDither), less than a whole unit (2^-3,
// 2^-9 * inv).
func quantBound(got, y, inv float32, sr bool) bool {
	d := math.Abs(float64(got) - float64(y))
	if sr {
		return d < math.Abs(float64(y))/8 || d < math.Ldexp(float64(inv), -9)
	}
	return d <= math.Abs(float64(y))/16 || d <= math.Ldexp(float64(inv), -10)
}

// TestEncodeMomentBlock checks EncodeMomentBlock and DecodeMoment against
// their closed form on blocks of every scale: the scale is a power of two
// putting the block's amax in (224, 448], every decoded value is within
// the rounding bound of its input (the root's, for the second moment), an
// all-zero block decodes to zeros, and encoding decoded values gives them
// back (a checkpoint round trip). Second moments whose root is below 2^-63
// are left out: their square rounds in float32's subnormal range.
func TestEncodeMomentBlock(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for it := range 2000 {
		n := 1 + r.IntN(128)
		root := it%2 == 1
		x := make([]float32, n)
		e := r.IntN(80) - 60
		if root { // squares above float32's subnormals (below, r*r rounds)
			e = r.IntN(60) - 40
		}
		for i := range x {
			x[i] = float32(math.Ldexp(r.NormFloat64(), e-r.IntN(12)))
			if root {
				x[i] = x[i] * x[i]
			}
			if r.IntN(20) == 0 {
				x[i] = 0
			}
		}
		codes := make([]byte, n)
		seed, pos := r.Uint32(), r.Uint64()
		inv := EncodeMomentBlock(codes, x, root, seed, pos)
		if f, _ := math.Frexp(float64(inv)); f != 0.5 {
			t.Fatalf("scale_inv %g is not a power of two", inv)
		}
		var amax float64
		got := make([]float32, n)
		for i, c := range codes {
			got[i] = DecodeMoment(c, inv, root)
			y, g := x[i], got[i]
			if root {
				y, g = sqrt32(y), sqrt32(g)
			}
			amax = max(amax, math.Abs(float64(y)))
			if !quantBound(g, y, inv, root) {
				t.Fatalf("block %d element %d: %g decodes to %g (scale_inv %g)", it, i, x[i], got[i], inv)
			}
		}
		if amax == 0 {
			if inv != 1 {
				t.Fatalf("all-zero block has scale_inv %g", inv)
			}
		} else if s := amax / float64(inv); s <= 224 || s > 448 {
			t.Fatalf("block %d: amax %g scaled to %g, not in (224, 448]", it, amax, s)
		}
		again := make([]byte, n)
		inv2 := EncodeMomentBlock(again, got, root, seed+1, pos)
		for i, c := range again {
			if d := DecodeMoment(c, inv2, root); math.Float32bits(d) != math.Float32bits(got[i]) {
				t.Fatalf("block %d element %d: %g encoded again decodes to %g", it, i, got[i], d)
			}
		}
	}
}

// TestMomentDTypeBytes checks the sizes the planner and the allocation use.
func TestMomentDTypeBytes(t *testing.T) {
	for _, c := range []struct {
		t            MomentDType
		n, block     int
		bytes, scale int
	}{
		{MomentFloat32, 1000, 128, 4000, 0},
		{MomentBFloat16, 1000, 128, 2000, 0},
		{MomentFP8, 1000, 128, 1000 + 4*8, 32},
		{MomentFP8, 1024, 32, 1024 + 4*32, 128},
	} {
		if b, s := c.t.Bytes(c.n, c.block), c.t.ScaleBytes(c.n, c.block); b != c.bytes || s != c.scale {
			t.Errorf("%v n=%d block=%d: %d bytes, %d of scales; want %d, %d", c.t, c.n, c.block, b, s, c.bytes, c.scale)
		}
	}
}

// TestEncodeDither checks the dithered rounding against its definition
// over every one of its 2^16 random words: the result is always one of the
// two E4M3 neighbours of |z| (|z| itself when it is an E4M3 value, zero
// included); in E4M3's normal range the mean over the words is |z| to
// within the quantisation of the probability (half of 2^-16 of a step);
// and among the values between two neighbours, those closer to the upper
// one round up more often.
func TestEncodeDither(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var grid []float64 // the non-negative E4M3 values, ascending
	for c := range 0x7f {
		grid = append(grid, float64(MomentFormat.Decode(uint8(c))))
	}
	neighbours := func(az float64) (down, up float64) {
		down, up = 0, grid[len(grid)-1]
		for _, g := range grid {
			if g <= az {
				down = g
			}
			if g >= az && g < up {
				up = g
			}
		}
		return down, up
	}
	for it := range 400 {
		z := float32(math.Ldexp(1+r.Float64(), -r.IntN(16)+8)) // [2^-7, 512)
		z = min(z, 448)
		if it%4 == 0 {
			z = float32(grid[r.IntN(len(grid))])
		}
		if it%5 == 0 {
			z = -z
		}
		az := math.Abs(float64(z))
		down, up := neighbours(az)
		sum := 0.0
		for w := range uint32(1 << 16) {
			got := float64(MomentFormat.Decode(EncodeDither(z, w)))
			if got != down && got != up {
				t.Fatalf("%g (r %#x) rounds to %g, not to a neighbour (%g, %g)", z, w, got, down, up)
			}
			sum += got
		}
		if az < 0x1p-6 || down == up {
			continue
		}
		if mean := sum / (1 << 16); math.Abs(mean-az) > (up-down)*0x1p-17*(1+1e-9) {
			t.Fatalf("%g: mean over every random word %g, %g steps off", z, mean, (mean-az)/(up-down))
		}
	}
}

// TestEncodeMomentBlockNonFinite checks that a second-moment block with an
// infinite or NaN root is rounded to nearest (no dither), its scale 1:
// Inf saturates to 448, NaN gives the NaN code, and the finite values
// round as E4M3.Encode does, whatever the seed.
func TestEncodeMomentBlockNonFinite(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	x := []float32{inf, 4, 2.1 * 2.1, 0, 1e-3}
	y := []float32{nan, 4, 2.1 * 2.1, 0}
	for seed := range uint32(20) {
		for _, b := range [][]float32{x, y} {
			codes := make([]byte, len(b))
			if inv := EncodeMomentBlock(codes, b, true, seed, uint64(seed)*7); inv != 1 {
				t.Fatalf("scale_inv %g of a non-finite block, want 1", inv)
			}
			for i, c := range codes {
				if want := MomentFormat.Encode(sqrt32(b[i])); c != want {
					t.Fatalf("seed %d: %g encodes to %#x, want %#x", seed, b[i], c, want)
				}
			}
		}
	}
}

// TestMomentScale checks MomentScale's division-free formula against
// fp8.ScaleFromAmax with power-of-two scales over every exponent, the
// mantissas around 1.75 (where the power steps down) and at the ends,
// random mantissas, zero, infinity and NaN.
func TestMomentScale(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	check := func(k uint32) {
		s, inv := MomentScale(k)
		ws, winv := fp8.ScaleFromAmax(math.Float32frombits(k), fp8.E4M3, 0, true)
		if math.Float32bits(s) != math.Float32bits(ws) || math.Float32bits(inv) != math.Float32bits(winv) {
			t.Fatalf("amax %g (0x%08x): scale %g, inv %g; fp8.ScaleFromAmax %g, %g", math.Float32frombits(k), k, s, inv, ws, winv)
		}
	}
	for _, k := range []uint32{0, 0x7f800000, 0x7fc00000, 0x7fffffff} {
		check(k)
	}
	for e := uint32(0); e < 255; e++ {
		for _, m := range []uint32{0, 1, 2, 0x5fffff, 0x600000, 0x600001, 0x600002, 0x7ffffe, 0x7fffff} {
			check(e<<23 | m)
		}
		for range 200 {
			check(e<<23 | r.Uint32()&0x7fffff)
		}
	}
}
