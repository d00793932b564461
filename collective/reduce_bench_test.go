package collective

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
)

// benchReduceSize is the length in bytes of every source of the benchmarks.
const benchReduceSize = 1 << 20

// benchSources returns n sources of benchReduceSize bytes holding gradient-like
// values of dt (normally distributed, a few orders of magnitude around 1e-3),
// so that branches on the values are no more predictable than in training.
func benchSources(n int, dt buffer.DType) [][]byte {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(dt)))
	srcs := make([][]byte, n)
	for r := range srcs {
		srcs[r] = make([]byte, benchReduceSize)
		for i := range benchReduceSize / dt.Size() {
			x := float32(rng.NormFloat64() * math.Exp2(-10+4*rng.NormFloat64()))
			var bits uint64
			switch dt {
			case buffer.BFloat16:
				bits = uint64(math.Float32bits(x) >> 16)
			case buffer.Float32:
				bits = uint64(math.Float32bits(x))
			case buffer.Float64:
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
			dt buffer.DType
			op ReduceOp
		}{
			{buffer.Float32, Sum}, {buffer.Float32, Avg}, {buffer.Float32, Max},
			{buffer.BFloat16, Sum}, {buffer.BFloat16, Avg}, {buffer.BFloat16, Max},
			{buffer.Uint32, Sum}, {buffer.Uint32, Max},
			{buffer.Int64, Sum}, {buffer.Int64, Max},
			{buffer.Float64, Sum},
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
	for _, dt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
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
			srcs := benchSources(n, buffer.Uint8)
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
