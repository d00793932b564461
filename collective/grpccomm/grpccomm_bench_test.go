package grpccomm_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
)

// benchSizes are the sizes of the whole buffer (all-gather output,
// reduce-scatter input): 1 MiB to 64 MiB, and up to 1 GiB with
// DISTOPT_BENCH_LARGE=1. DISTOPT_BENCH_RANKS sets the number of ranks
// (default 2), all in this process, talking gRPC over loopback.
func benchSizes() []int {
	sizes := []int{1 << 20, 4 << 20, 16 << 20, 64 << 20}
	if os.Getenv("DISTOPT_BENCH_LARGE") == "1" {
		sizes = append(sizes, 256<<20, 1<<30)
	}
	return sizes
}

func benchRanks() int {
	if n, err := strconv.Atoi(os.Getenv("DISTOPT_BENCH_RANKS")); err == nil && n >= 1 {
		return n
	}
	return 2
}

// benchCollective measures op over n ranks for each size. ops(r, size)
// returns rank r's op for a whole buffer of size bytes.
func benchCollective(b *testing.B, ops func(n, r, size int) collective.Op) {
	n := benchRanks()
	comms := inProcess(b, n, grpccomm.Config{})
	for _, size := range benchSizes() {
		b.Run(fmt.Sprintf("n=%d/%dMiB", n, size>>20), func(b *testing.B) {
			rankOps := make([]collective.Op, n)
			for r := range n {
				rankOps[r] = ops(n, r, size)
			}
			// Ranks 1..n-1 run in helper goroutines, one op per token.
			start, done := make([]chan struct{}, n), make(chan error, n)
			for r := 1; r < n; r++ {
				start[r] = make(chan struct{})
				go func() {
					for range start[r] {
						done <- comms[r].Start(rankOps[r]).Wait(context.Background())
					}
				}()
			}
			defer func() {
				for r := 1; r < n; r++ {
					close(start[r])
				}
			}()
			ctx := context.Background()
			b.ReportAllocs()
			b.SetBytes(int64(size))
			t0 := time.Now()
			for b.Loop() {
				for r := 1; r < n; r++ {
					start[r] <- struct{}{}
				}
				if err := comms[0].Start(rankOps[0]).Wait(ctx); err != nil {
					b.Fatal(err)
				}
				for r := 1; r < n; r++ {
					if err := <-done; err != nil {
						b.Fatal(err)
					}
				}
			}
			sec := time.Since(t0).Seconds() / float64(b.N)
			algbw := float64(size) / sec / 1e9
			b.ReportMetric(algbw, "GB/s")
			b.ReportMetric(algbw*float64(n-1)/float64(n), "busGB/s")
		})
	}
}

// BenchmarkAllGather gathers bytes: each rank contributes size/n bytes.
func BenchmarkAllGather(b *testing.B) {
	benchCollective(b, func(n, r, size int) collective.Op {
		dst := make(buffer.HostBuffer, size/n*n)
		return collective.Op{Kind: collective.OpAllGather, Dst: dst, Src: dst[r*(size/n) : (r+1)*(size/n)]}
	})
}

// BenchmarkReduceScatter sums bfloat16 gradients, as the optimizer does:
// each rank contributes size bytes and keeps size/n.
func BenchmarkReduceScatter(b *testing.B) {
	benchCollective(b, func(n, r, size int) collective.Op {
		per := size / n &^ 1
		src := make(buffer.HostBuffer, per*n)
		return collective.Op{Kind: collective.OpReduceScatter, Dst: src[r*per : (r+1)*per], Src: src, DType: buffer.BFloat16, Reduce: collective.Sum}
	})
}
