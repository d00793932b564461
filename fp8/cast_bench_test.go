package fp8

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// benchN is the number of elements of BenchmarkAmax: 2^24.
const benchN = 1 << 24

// castN is the number of elements of BenchmarkEncode, BenchmarkCastScaled
// and BenchmarkCopy: 2^20 (4 MiB of float32).
const castN = 1 << 20

func benchInput() []float32 { return normalSlice(benchN, 1) }

// normalSlice returns n standard normal values times sigma.
func normalSlice(n int, sigma float32) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(r.NormFloat64()) * sigma
	}
	return src
}

// castCase is an input of the cast benchmarks: standard normal values and
// the scale applied to them.
type castCase struct {
	name  string
	scale func(f Format, src []float32) float32
}

// castCases are a realistic cast (scale = Max/amax, as current scaling
// computes it, so the largest value meets Max) and one where about two
// thirds of the results are subnormal (the scale is the smallest normal of
// the format, 2^-6 or 2^-14, which is then one standard deviation).
var castCases = []castCase{
	{"amax", func(f Format, src []float32) float32 { return f.Max() / Amax(src) }},
	{"subnormal", func(f Format, _ []float32) float32 {
		return float32(math.Ldexp(1, 1-map[Format]int{E4M3: 7, E5M2: 15}[f]))
	}},
}

// perElement reports the time per element of a benchmark of n elements
// per iteration.
func perElement(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/elem")
}

// encodeSlice writes the codes of src to dst with the encoder of f named
// by how: the branchy first formulation, the select-based scalar encoder
// of Encode, or the code table of castScaled.
func encodeSlice(dst []byte, src []float32, f Format, how string) {
	dst = dst[:len(src)]
	switch {
	case how == "table":
		t := codeTables[f]()
		for i, x := range src {
			dst[i] = t.code(x)
		}
	case f == E4M3 && how == "branchy":
		for i, x := range src {
			dst[i] = branchyE4M3(x)
		}
	case f == E4M3:
		for i, x := range src {
			dst[i] = encodeE4M3(x)
		}
	case how == "branchy":
		for i, x := range src {
			dst[i] = branchyE5M2(x)
		}
	default:
		for i, x := range src {
			dst[i] = encodeE5M2(x)
		}
	}
}

// BenchmarkEncode encodes 2^20 values already scaled into the format
// (castCases) with each encoder of encodeSlice; bytes are those read (4 per
// element).
func BenchmarkEncode(b *testing.B) {
	dst := make([]byte, castN)
	for _, f := range []Format{E4M3, E5M2} {
		for _, c := range castCases {
			src := normalSlice(castN, 1)
			s := c.scale(f, src)
			for i := range src {
				src[i] *= s
			}
			for _, how := range []string{"branchy", "select", "table"} {
				b.Run(fmt.Sprintf("%v/%s/%s", f, c.name, how), func(b *testing.B) {
					b.SetBytes(4 * castN)
					b.ReportAllocs()
					for b.Loop() {
						encodeSlice(dst, src, f, how)
					}
					perElement(b, castN)
				})
			}
		}
	}
}

// BenchmarkCastScaled runs the serial kernel with the branchy encoder, the
// serial kernel (code table), and the parallel CastScaled over 2^20 standard normal
// values (castCases); bytes are those read (4 per element).
func BenchmarkCastScaled(b *testing.B) {
	src := normalSlice(castN, 1)
	dst := make([]byte, castN)
	for _, f := range []Format{E4M3, E5M2} {
		for _, c := range castCases {
			s := c.scale(f, src)
			for _, v := range []struct {
				name string
				run  func()
			}{
				{"branchy", func() { branchyCastScaled(dst, src, s, f) }},
				{"serial", func() { castScaled(dst, src, s, f) }},
				{"parallel", func() { CastScaled(dst, src, s, f) }},
			} {
				b.Run(fmt.Sprintf("%v/%s/%s", f, c.name, v.name), func(b *testing.B) {
					b.SetBytes(4 * castN)
					b.ReportAllocs()
					for b.Loop() {
						v.run()
					}
					perElement(b, castN)
				})
			}
		}
	}
}

// BenchmarkCopy copies the 4 MiB input of BenchmarkCastScaled into another
// float32 slice: the floor a cast that reads its input once can approach.
func BenchmarkCopy(b *testing.B) {
	src := normalSlice(castN, 1)
	dst := make([]float32, castN)
	b.SetBytes(4 * castN)
	b.ReportAllocs()
	for b.Loop() {
		copy(dst, src)
	}
	perElement(b, castN)
}

// BenchmarkAmax compares the serial kernel with the parallel Amax over 2^24
// elements.
func BenchmarkAmax(b *testing.B) {
	src := benchInput()
	b.Run("serial", func(b *testing.B) {
		b.SetBytes(4 * benchN)
		b.ReportAllocs()
		for b.Loop() {
			amaxBits(src)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(4 * benchN)
		b.ReportAllocs()
		for b.Loop() {
			Amax(src)
		}
	})
}
