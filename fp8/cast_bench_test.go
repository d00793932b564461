package fp8

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchN is the number of elements of the benchmarks: 2^24.
const benchN = 1 << 24

func benchInput() []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, benchN)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	return src
}

// BenchmarkCastScaled compares the serial kernel with the parallel
// CastScaled over 2^24 elements; bytes are those read (4 per element).
func BenchmarkCastScaled(b *testing.B) {
	src := benchInput()
	dst := make([]byte, len(src))
	for _, f := range []Format{E4M3, E5M2} {
		b.Run(fmt.Sprintf("%v/serial", f), func(b *testing.B) {
			b.SetBytes(4 * benchN)
			b.ReportAllocs()
			for b.Loop() {
				castScaled(dst, src, 3.5, f)
			}
		})
		b.Run(fmt.Sprintf("%v/parallel", f), func(b *testing.B) {
			b.SetBytes(4 * benchN)
			b.ReportAllocs()
			for b.Loop() {
				CastScaled(dst, src, 3.5, f)
			}
		})
	}
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
