package collective

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// benchReduceSize is the length in bytes of every source of the benchmarks.
const benchReduceSize = 1 << 20

// benchSources returns n sources of benchReduceSize bytes holding gradient-like
// values of dt (normally distributed, a few orders of magnitude around 1e-3),
// so that branches on the values are no more predictable than in training.
func benchSources(n int, dt DType) [][]byte {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(dt)))
	srcs := make([][]byte, n)
	for r := range srcs {
		srcs[r] = make([]byte, benchReduceSize)
		for i := range benchReduceSize / dt.Size() {
			x := float32(rng.NormFloat64() * math.Exp2(-10+4*rng.NormFloat64()))
			var bits uint64
			switch dt {
			case BFloat16:
				bits = uint64(math.Float32bits(x) >> 16)
			case Float32:
				bits = uint64(math.Float32bits(x))
			case Float64:
				bits = math.Float64bits(float64(x))
			default:
				bits = rng.Uint64()
			}
			SetElementBits(srcs[r], dt, i, bits)
		}
	}
	return srcs
}

// BenchmarkReduce reports the bytes read from the sources per second.
func BenchmarkReduce(b *testing.B) {
	for _, n := range []int{2, 8} {
		for _, c := range []struct {
			dt DType
			op ReduceOp
		}{
			{Float32, Sum}, {Float32, Avg}, {Float32, Max},
			{BFloat16, Sum}, {BFloat16, Avg}, {BFloat16, Max},
			{Uint32, Sum}, {Uint32, Max},
			{Int64, Sum}, {Int64, Max},
			{Float64, Sum},
		} {
			b.Run(fmt.Sprintf("n=%d/%s/%s", n, c.dt, c.op), func(b *testing.B) {
				srcs := benchSources(n, c.dt)
				dst := make([]byte, benchReduceSize)
				b.SetBytes(int64(n * benchReduceSize))
				b.ReportAllocs()
				for b.Loop() {
					Reduce(dst, srcs, c.dt, c.op)
				}
			})
		}
	}
}

// BenchmarkReduceUnaligned reads and writes every operand one byte past an
// aligned start, which Reduce handles by copying blocks through scratch.
func BenchmarkReduceUnaligned(b *testing.B) {
	for _, dt := range []DType{Float32, BFloat16} {
		b.Run(fmt.Sprintf("n=2/%s/sum", dt), func(b *testing.B) {
			srcs := benchSources(2, dt)
			for r, s := range srcs {
				srcs[r] = append([]byte{0}, s...)[1:]
			}
			dst := make([]byte, benchReduceSize+1)[1:]
			b.SetBytes(int64(2 * benchReduceSize))
			b.ReportAllocs()
			for b.Loop() {
				Reduce(dst, srcs, dt, Sum)
			}
		})
	}
}

// BenchmarkReduceCopy is the floor of BenchmarkReduce: it reads the same
// bytes with copy, one source after the other into dst.
func BenchmarkReduceCopy(b *testing.B) {
	for _, n := range []int{2, 8} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			srcs := benchSources(n, Uint8)
			dst := make([]byte, benchReduceSize)
			b.SetBytes(int64(n * benchReduceSize))
			b.ReportAllocs()
			for b.Loop() {
				for _, s := range srcs {
					copy(dst, s)
				}
			}
		})
	}
}
