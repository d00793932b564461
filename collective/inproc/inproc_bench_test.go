package inproc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
)

// benchOp runs one op per rank per iteration, each rank on its own
// goroutine; bytes is what one rank's op moves (its destination).
func benchOp(b *testing.B, n, bytes int, op func(r int) collective.Op) {
	comms := inproc.New(n)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ops := make([]collective.Op, n)
	for r := range ops {
		ops[r] = op(r)
	}
	ctx := context.Background()
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	for b.Loop() {
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Go(func() {
				if err := c.Start(ops[r]).Wait(ctx); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}

func BenchmarkAllGather(b *testing.B) {
	for _, n := range []int{2, 8} {
		for _, total := range []int{64 << 10, 16 << 20} {
			b.Run(fmt.Sprintf("n=%d/dst=%dKiB", n, total>>10), func(b *testing.B) {
				m := total / n
				benchOp(b, n, total, func(int) collective.Op {
					return collective.Op{Kind: collective.OpAllGather,
						Dst: make(buffer.HostBuffer, n*m), Src: make(buffer.HostBuffer, m)}
				})
			})
		}
	}
}

func BenchmarkReduceScatter(b *testing.B) {
	for _, n := range []int{2, 8} {
		for _, total := range []int{64 << 10, 16 << 20} {
			for _, dt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
				b.Run(fmt.Sprintf("n=%d/src=%dKiB/%s", n, total>>10, dt), func(b *testing.B) {
					m := total / n
					benchOp(b, n, total, func(int) collective.Op {
						return collective.Op{Kind: collective.OpReduceScatter, DType: dt, Reduce: collective.Avg,
							Dst: make(buffer.HostBuffer, m), Src: make(buffer.HostBuffer, n*m)}
					})
				})
			}
		}
	}
}
