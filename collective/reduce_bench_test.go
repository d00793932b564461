package collective

import (
	"fmt"
	"testing"
)

func BenchmarkReduce(b *testing.B) {
	const size = 1 << 20
	for _, n := range []int{2, 8} {
		for _, c := range []struct {
			dt DType
			op ReduceOp
		}{{Float32, Sum}, {BFloat16, Avg}, {Float32, Max}, {Uint32, Max}} {
			b.Run(fmt.Sprintf("n=%d/%s/%s", n, c.dt, c.op), func(b *testing.B) {
				srcs := make([][]byte, n)
				for r := range srcs {
					srcs[r] = make([]byte, size)
				}
				dst := make([]byte, size)
				b.SetBytes(int64(n * size)) // bytes read
				b.ReportAllocs()
				for b.Loop() {
					Reduce(dst, srcs, c.dt, c.op)
				}
			})
		}
	}
}
