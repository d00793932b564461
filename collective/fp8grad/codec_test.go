package fp8grad

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/fp8"
)

var formats = []fp8.Format{fp8.E4M3, fp8.E5M2}

// topHalfStep is the largest error of a cast relative to the block's amax:
// half a step of the top binade over the smallest scaled amax (the scale
// is a power of two, so the scaled amax is above half the format's max).
func topHalfStep(f fp8.Format) float64 {
	if f == fp8.E4M3 {
		return 16.0 / 224 // steps of 32 in [256, 448]
	}
	return 4096.0 / 28672 // steps of 8192 in [32768, 57344]
}

// gradients returns n test values: each run of block elements has its own
// magnitude, 2^e with e in [-40, 30) (so blocks span and exceed the FP8
// range), some runs are all zero, some elements are zero.
func gradients(rng *rand.Rand, n, block int) []float32 {
	x := make([]float32, n)
	for lo := 0; lo < n; lo += block {
		hi := min(lo+block, n)
		if rng.IntN(6) == 0 {
			continue // a block of zeros
		}
		mag := math.Ldexp(1, rng.IntN(70)-40)
		for i := lo; i < hi; i++ {
			if rng.IntN(10) == 0 {
				continue
			}
			x[i] = float32(rng.NormFloat64() * mag * math.Ldexp(1, -rng.IntN(12)))
		}
	}
	return x
}

// decoded returns the values a piece of n elements stands for, through
// fp8.Dequantize (another decoder than DequantSum's table).
func decoded(piece []byte, n, block int, f fp8.Format) []float32 {
	nb := blocks(n, block)
	out := make([]float32, n)
	for k := range nb {
		lo, hi := k*block, min((k+1)*block, n)
		inv := math.Float32frombits(binary.LittleEndian.Uint32(piece[4*k:]))
		fp8.Dequantize(out[lo:hi], piece[4*nb+lo:4*nb+hi], inv, f)
	}
	return out
}

// TestQuantizeExact: blocks of values that are FP8 codes times one power
// of two, with one code in the format's top binade, come back exactly
// (the scale is then exactly that power of two's inverse).
func TestQuantizeExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range formats {
		top := uint8(0x78) // E4M3 256: codes 0x78..0x7e are the top binade
		if f == fp8.E5M2 {
			top = 0x78 // E5M2 32768..57344: 0x78..0x7b
		}
		for _, block := range []int{1, 7, 128} {
			for _, n := range []int{1, 127, 300} {
				x := make([]float32, n)
				for lo := 0; lo < n; lo += block {
					k := rng.IntN(60) - 40
					hi := min(lo+block, n)
					for i := lo; i < hi; i++ {
						c := uint8(rng.IntN(0x78)) | uint8(rng.IntN(2))<<7
						x[i] = float32(math.Ldexp(float64(f.Decode(c)), k))
					}
					c := top + uint8(rng.IntN(3))
					x[lo+rng.IntN(hi-lo)] = float32(math.Ldexp(float64(f.Decode(c)), k))
				}
				piece := make([]byte, PieceBytes(n, block))
				Quantize(piece, x, nil, block, f)
				got := decoded(piece, n, block, f)
				for i := range x {
					if math.Float32bits(got[i]) != math.Float32bits(x[i]) {
						t.Fatalf("%v block %d n %d: element %d: %g came back as %g", f, block, n, i, x[i], got[i])
					}
				}
			}
		}
	}
}

// TestQuantizeBound: random gradients spanning and exceeding the FP8
// range, blocks of zeros, odd sizes: every element comes back within
// topHalfStep of its block's amax, zero blocks as zeros with scale_inv 1,
// scales are powers of two, padding is zero, and the source is untouched.
func TestQuantizeBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, f := range formats {
		for _, block := range []int{1, 5, 32, 128} {
			for _, n := range []int{1, 3, 129, 1000} {
				t.Run(fmt.Sprintf("%v/block=%d/n=%d", f, block, n), func(t *testing.T) {
					x := gradients(rng, n, block)
					orig := append([]float32(nil), x...)
					piece := make([]byte, PieceBytes(n, block)+8)
					for i := range piece {
						piece[i] = 0xa5
					}
					Quantize(piece[:PieceBytes(n, block)], x, nil, block, f)
					verifyPiece(t, piece, x, orig, block, f)
				})
			}
		}
	}
}

func verifyPiece(t *testing.T, piece []byte, x, orig []float32, block int, f fp8.Format) {
	t.Helper()
	n := len(x)
	nb := blocks(n, block)
	pb := PieceBytes(n, block)
	for i := pb; i < len(piece); i++ {
		if piece[i] != 0xa5 {
			t.Fatalf("byte %d past the piece written", i-pb)
		}
	}
	for i := 4*nb + n; i < pb; i++ {
		if piece[i] != 0 {
			t.Fatalf("padding byte %d is %#x", i, piece[i])
		}
	}
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(orig[i]) {
			t.Fatalf("source element %d modified", i)
		}
	}
	got := decoded(piece[:pb], n, block, f)
	for k := range nb {
		lo, hi := k*block, min((k+1)*block, n)
		inv := math.Float32frombits(binary.LittleEndian.Uint32(piece[4*k:]))
		if fr, _ := math.Frexp(float64(inv)); fr != 0.5 {
			t.Fatalf("block %d: scale_inv %g is not a power of two", k, inv)
		}
		var amax float64
		for _, v := range x[lo:hi] {
			amax = max(amax, math.Abs(float64(v)))
		}
		if amax == 0 && inv != 1 {
			t.Fatalf("zero block %d: scale_inv %g, want 1", k, inv)
		}
		for i := lo; i < hi; i++ {
			if err := math.Abs(float64(got[i]) - float64(x[i])); err > amax*topHalfStep(f) {
				t.Fatalf("element %d: %g came back as %g (block amax %g)", i, x[i], got[i], amax)
			}
		}
	}
}

// TestQuantizeNonFinite: a NaN or an infinity is sent as the NaN code
// and decodes to NaN; every other byte of the piece (the block's scale
// included) is what it is with a zero there instead.
func TestQuantizeNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n, block = 300, 128
	for _, f := range formats {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			x := gradients(rng, n, block)
			at := 200
			x[at] = 0
			want := make([]byte, PieceBytes(n, block))
			Quantize(want, x, nil, block, f)
			x[at] = bad
			piece := make([]byte, PieceBytes(n, block))
			Quantize(piece, x, nil, block, f)
			if c := piece[4*blocks(n, block)+at]; c != f.NaN() {
				t.Fatalf("%v %g: code %#x, want the NaN code", f, bad, c)
			}
			want[4*blocks(n, block)+at] = f.NaN()
			for i := range piece {
				if piece[i] != want[i] {
					t.Fatalf("%v %g: byte %d is %#x, want %#x", f, bad, i, piece[i], want[i])
				}
			}
			for i, v := range decoded(piece, n, block, f) {
				if math.IsNaN(float64(v)) != (i == at) {
					t.Fatalf("%v %g: element %d decodes to %g", f, bad, i, v)
				}
			}
		}
	}
}

// TestDequantSum compares DequantSum with the pieces decoded by
// fp8.Dequantize and added in float32 in order, bit for bit.
func TestDequantSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, f := range formats {
		for _, d := range []int{1, 2, 3, 4} {
			for _, n := range []int{1, 129, 517} {
				const block = 64
				pieces := make([][]byte, d)
				want := make([]float32, n)
				for s := range d {
					pieces[s] = make([]byte, PieceBytes(n, block))
					x := gradients(rng, n, block)
					if s == 1 {
						x[n/2] = float32(math.Inf(1))
					}
					Quantize(pieces[s], x, nil, block, f)
					for i, v := range decoded(pieces[s], n, block, f) {
						if s == 0 {
							want[i] = v
						} else {
							want[i] = float32(want[i] + v)
						}
					}
				}
				for _, div := range []float32{1, float32(d)} {
					got := make([]float32, n)
					DequantSum(got, pieces, block, f, div)
					for i := range n {
						w := float32(want[i] / div)
						if math.Float32bits(got[i]) != math.Float32bits(w) && !(math.IsNaN(float64(w)) && math.IsNaN(float64(got[i]))) {
							t.Fatalf("%v d=%d n=%d div=%g: element %d = %g, want %g", f, d, n, div, i, got[i], w)
						}
						if d > 1 && math.IsNaN(float64(got[i])) != (i == n/2) {
							t.Fatalf("element %d is %g; only %d is not finite", i, got[i], n/2)
						}
						if math.IsNaN(float64(got[i])) && math.Float32bits(got[i]) != NaNBits {
							t.Fatalf("element %d: NaN bits %#x, want %#x", i, math.Float32bits(got[i]), NaNBits)
						}
					}
				}
			}
		}
	}
}

// TestErrorFeedbackTelescopes: quantizing the same gradient T times with
// error feedback transmits T*g minus the last residual, so the error of
// the total stays within one step's error, while without feedback it
// grows T-fold.
func TestErrorFeedbackTelescopes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const n, block, steps = 256, 128, 50
	g := gradients(rng, n, block)
	for i := range g {
		g[i] = float32(rng.NormFloat64()) // one magnitude: errors of every element matter
	}
	res := make([]float32, n)
	piece := make([]byte, PieceBytes(n, block))
	sumEF := make([]float64, n)
	sumPlain := make([]float64, n)
	for range steps {
		Quantize(piece, g, res, block, fp8.E4M3)
		for i, v := range decoded(piece, n, block, fp8.E4M3) {
			sumEF[i] += float64(v)
		}
		Quantize(piece, g, nil, block, fp8.E4M3)
		for i, v := range decoded(piece, n, block, fp8.E4M3) {
			sumPlain[i] += float64(v)
		}
	}
	var errEF, errPlain float64
	for i := range n {
		exact := steps * float64(g[i])
		errEF = max(errEF, math.Abs(sumEF[i]-exact))
		errPlain = max(errPlain, math.Abs(sumPlain[i]-exact))
	}
	if errEF > 0.5 || errPlain < 10*errEF {
		t.Fatalf("after %d steps: largest error of the total %g with error feedback, %g without", steps, errEF, errPlain)
	}
}
