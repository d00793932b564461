package fp8

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"
)

// refRound is the reference rounding of the exhaustive sweeps, written in
// float64 arithmetic and independent of the bit manipulation of Encode and
// BF16FromFloat32: it rounds x to the grid of a binary format with m
// mantissa bits and smallest normal exponent emin, whose quantum in the
// binade [2^E, 2^(E+1)) is 2^(E-m), with ties to even. e is the exponent
// math.Frexp gives for |x| (|x| = f*2^e, 0.5 <= f < 1).
func refRound(v float64, e, m, emin int) float64 {
	q := math.Ldexp(1, max(e-1, emin)-m)
	return math.RoundToEven(v/q) * q
}

// refFP8 returns the value Encode must produce for x in a format with m
// mantissa bits, exponent bias bias and largest finite value maxv, with the
// sign of x (so -0 for negative values that round to zero); NaN for NaN.
func refFP8(x float64, e, m, bias int, maxv float64) float64 {
	if math.IsNaN(x) {
		return math.NaN()
	}
	v := math.Abs(x)
	r := maxv // satfinite: overflow and Inf saturate
	if v <= maxv {
		r = refRound(v, e, m, 1-bias)
	}
	return math.Copysign(r, x)
}

// refBF16 returns the value BF16FromFloat32 must produce for x: the nearest
// bfloat16 (8 significant bits, float32's exponent range), ties to even,
// values beyond the largest finite bfloat16 rounding to ±Inf; NaN for NaN.
func refBF16(x float64, e int) float64 {
	if math.IsNaN(x) {
		return math.NaN()
	}
	const bf16Max = (2 - 0x1p-7) * 0x1p127
	r := refRound(math.Abs(x), e, 7, -126)
	if r > bf16Max {
		r = math.Inf(1)
	}
	return math.Copysign(r, x)
}

// shortLow are the low 12 bits of the patterns a short sweep checks, with
// all 2^20 values of the high bits: every exponent, and every rounding
// position of fp8 and bfloat16 with ties, near-ties and carries.
var shortLow = []uint32{0, 1, 0x7ff, 0x800, 0x801, 0xfff}

// sweep calls check(bits) for every uint32 (or, if short, for those whose
// low 12 bits are in shortLow), split across all cores, and reports the
// first failures. check returns a description of the mismatch, or "".
func sweep(t *testing.T, short bool, check func(b uint32) string) {
	t.Helper()
	const maxFail = 10
	var (
		mu    sync.Mutex
		fails []string
		wg    sync.WaitGroup
	)
	workers := uint64(runtime.GOMAXPROCS(0))
	const span = uint64(1) << 32
	for w := range workers {
		wg.Go(func() {
			var local []string
			lo, hi := span*w/workers, span*(w+1)/workers
			for b := lo; b < hi && len(local) < maxFail; b++ {
				if short {
					if b&0xfff != 0 {
						b |= 0xfff
						continue
					}
					for _, l := range shortLow {
						if msg := check(uint32(b) | l); msg != "" {
							local = append(local, msg)
						}
					}
					b |= 0xfff
					continue
				}
				if msg := check(uint32(b)); msg != "" {
					local = append(local, msg)
				}
			}
			mu.Lock()
			fails = append(fails, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	for i, f := range fails {
		if i == maxFail {
			t.Errorf("... and more")
			break
		}
		t.Error(f)
	}
}

// sameValue reports whether got (a decoded value) equals want bit for bit,
// NaNs matching any NaN.
func sameValue(got float32, want float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(float64(got))
	}
	return math.Float64bits(float64(got)) == math.Float64bits(want)
}

// TestExhaustive checks Encode (both formats) and BF16FromFloat32 against
// the float64 reference on every one of the 2^32 float32 bit patterns, and
// the code tables of CastScaled against Encode. Since Decode is injective
// apart from NaN codes (checked by TestDecodeClosedForm), comparing the
// decoded value with its sign pins the code; NaN inputs must give exactly
// the format's NaN code (BF16NaN for bfloat16). With -short or the race
// detector only the patterns of shortLow are checked.
func TestExhaustive(t *testing.T) {
	short := testing.Short() || raceEnabled
	start := time.Now()
	tables := [...]*codeTable{E4M3: codeTables[E4M3](), E5M2: codeTables[E5M2]()}
	sweep(t, short, func(b uint32) string {
		x := math.Float32frombits(b)
		v := float64(x)
		_, e := math.Frexp(math.Abs(v))
		isNaN := v != v
		for _, c := range [...]struct {
			f       Format
			m, bias int
			maxv    float64
		}{{E4M3, 3, 7, 448}, {E5M2, 2, 15, 57344}} {
			code := c.f.Encode(x)
			if tc := tables[c.f].code(x); tc != code {
				return fmt.Sprintf("%v code table(%#08x) = %#02x, Encode gives %#02x", c.f, b, tc, code)
			}
			if isNaN {
				if code != c.f.NaN() {
					return fmt.Sprintf("%v.Encode(%#08x NaN) = %#02x, want %#02x", c.f, b, code, c.f.NaN())
				}
				continue
			}
			if want := refFP8(v, e, c.m, c.bias, c.maxv); !sameValue(c.f.Decode(code), want) {
				return fmt.Sprintf("%v.Encode(%#08x = %g) = %#02x (%g), want %g", c.f, b, x, code, c.f.Decode(code), want)
			}
		}
		h := BF16FromFloat32(x)
		if isNaN {
			if h != BF16NaN {
				return fmt.Sprintf("BF16FromFloat32(%#08x NaN) = %#04x, want %#04x", b, h, BF16NaN)
			}
			return ""
		}
		if want := refBF16(v, e); !sameValue(Float32FromBF16(h), want) {
			return fmt.Sprintf("BF16FromFloat32(%#08x = %g) = %#04x (%g), want %g", b, x, h, Float32FromBF16(h), want)
		}
		return ""
	})
	t.Logf("checked all patterns (short=%t) in %v on %d cores", short, time.Since(start).Round(time.Millisecond), runtime.GOMAXPROCS(0))
}
