package collectivetest

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
)

// inputs returns the bytes every rank contributes to the case named name:
// element s is rank s's, count elements of dt. They depend only on seed,
// name, s and the arguments, so every rank computes the same. In Run, the
// ranks share one copy.
func (e *env) inputs(name string, count int, dt buffer.DType, specials bool) [][]byte {
	key := fmt.Sprintf("%s/%d/%s/%v", name, count, dt, specials)
	return e.memo(key, func() any {
		h := fnv.New64a()
		h.Write([]byte(key))
		out := make([][]byte, e.n)
		for s := range out {
			rng := rand.New(rand.NewPCG(uint64(e.seed), h.Sum64()+uint64(s)))
			out[s] = make([]byte, count*dt.Size())
			if !isFloat(dt) {
				fillBits(rng, out[s])
				continue
			}
			for i := range count {
				collective.SetElementBits(out[s], dt, i, element(rng, dt, specials))
			}
		}
		return out
	}).([][]byte)
}

// fillBits fills b with random bytes.
func fillBits(rng *rand.Rand, b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, rng.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// expected returns collective.Reduce of bytes [lo, hi) of every rank's
// input (shared by the ranks in Run).
func (e *env) expected(key string, in [][]byte, lo, hi int, dt buffer.DType, red collective.ReduceOp) []byte {
	return e.memo(fmt.Sprintf("%s/expected/%d/%d", key, lo, hi), func() any {
		want := make([]byte, hi-lo)
		srcs := make([][]byte, len(in))
		for s := range srcs {
			srcs[s] = in[s][lo:hi]
		}
		collective.Reduce(want, srcs, dt, red)
		return want
	}).([]byte)
}

// element returns the bits of one element of dt. Floating point values are
// small integers and fractions (so that sums and averages round and
// cancel), random bit patterns, and with specials also NaN with payloads,
// ±Inf, ±0, subnormals and the largest finite values.
func element(rng *rand.Rand, dt buffer.DType, specials bool) uint64 {
	w := 8 * uint(dt.Size())
	bits := rng.Uint64() >> (64 - w)
	var x float64
	switch dt {
	case buffer.Uint8, buffer.Uint32, buffer.Int64:
		return bits
	}
	pick := rng.IntN(10)
	if specials {
		pick = rng.IntN(20)
	}
	switch pick {
	case 0, 1, 2:
		x = float64(rng.IntN(64) - 32)
	case 3, 4, 5:
		x = float64(rng.IntN(1<<12)-1<<11) / 64
	case 6, 7, 8:
		x = rng.NormFloat64() * math.Ldexp(1, rng.IntN(20)-10)
	case 9:
		// Random bits of a finite value (exponent not all ones).
		for isNaNOrInf(bits, dt) {
			bits = rng.Uint64() >> (64 - w)
		}
		return bits
	case 10, 11:
		return nanBits(dt) | bits&(signBit(dt)|1) // payload 1 or 0 beyond quiet bit
	case 12, 13:
		x = math.Inf(1 - 2*rng.IntN(2))
	case 14, 15:
		x = math.Copysign(0, float64(1-2*rng.IntN(2)))
	case 16, 17:
		return bits & (1<<(w-9) - 1) // subnormal or tiny
	default:
		return maxBits(dt) | bits&signBit(dt)
	}
	return fromFloat64(x, dt)
}

func signBit(dt buffer.DType) uint64 { return 1 << (8*dt.Size() - 1) }

func nanBits(dt buffer.DType) uint64 {
	switch dt {
	case buffer.BFloat16:
		return 0x7fc0
	case buffer.Float32:
		return 0x7fc00000
	}
	return 0x7ff8000000000000
}

func maxBits(dt buffer.DType) uint64 {
	switch dt {
	case buffer.BFloat16:
		return 0x7f7f
	case buffer.Float32:
		return uint64(math.Float32bits(math.MaxFloat32))
	}
	return math.Float64bits(math.MaxFloat64)
}

// fromFloat64 converts x (exact in dt's precision, or rounded for float32
// and bfloat16 by truncation, which is fine for test inputs).
func fromFloat64(x float64, dt buffer.DType) uint64 {
	switch dt {
	case buffer.BFloat16:
		return uint64(math.Float32bits(float32(x)) >> 16)
	case buffer.Float32:
		return uint64(math.Float32bits(float32(x)))
	}
	return math.Float64bits(x)
}

func isFloat(dt buffer.DType) bool {
	return dt == buffer.BFloat16 || dt == buffer.Float32 || dt == buffer.Float64
}

// isNaNOrInf reports whether bits of a floating point dt have an all-ones
// exponent.
func isNaNOrInf(bits uint64, dt buffer.DType) bool {
	switch dt {
	case buffer.BFloat16:
		return bits&0x7f80 == 0x7f80
	case buffer.Float32:
		return bits&0x7f800000 == 0x7f800000
	}
	return bits&0x7ff0000000000000 == 0x7ff0000000000000
}

func isNaN(bits uint64, dt buffer.DType) bool {
	return isNaNOrInf(bits, dt) && mantissa(bits, dt) != 0
}

// mantissa returns the fraction bits of a floating point element.
func mantissa(bits uint64, dt buffer.DType) uint64 {
	switch dt {
	case buffer.BFloat16:
		return bits & 0x7f
	case buffer.Float32:
		return bits & 0x7fffff
	}
	return bits & (1<<52 - 1)
}

// compare checks got against want element by element: bit for bit, except
// that any NaN matches any NaN.
func compare(got, want []byte, dt buffer.DType) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d bytes, want %d", len(got), len(want))
	}
	if string(got) == string(want) {
		return nil
	}
	bad, first := 0, ""
	for i := range len(got) / dt.Size() {
		g, w := collective.ElementBits(got, dt, i), collective.ElementBits(want, dt, i)
		if g == w || isFloat(dt) && isNaN(g, dt) && isNaN(w, dt) {
			continue
		}
		if bad == 0 {
			first = fmt.Sprintf("element %d: got %#x, want %#x", i, g, w)
		}
		bad++
	}
	if bad == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d %s elements differ; first: %s", bad, len(got)/dt.Size(), dt, first)
}
