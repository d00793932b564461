package fp8grad_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/inproc"
)

// BenchmarkReduceScatter reduce-scatters a bfloat16 gradient bucket of
// 4 Mi elements on 4 in-process ranks, as bfloat16 (the inner
// communicator alone) and in FP8 (fp8grad.Comm, E4M3, blocks of 128).
// wire-B/elem is the bytes each rank sends per element of its bucket
// (d-1 of its d pieces): the FP8 codes and scales against 2 per bfloat16.
// In process the exchange is a memory copy, so the times show the codec's
// CPU cost, not a network's gain.
func BenchmarkReduceScatter(b *testing.B) {
	const d, total = 4, 4 << 20
	n := total / d
	for _, mode := range []string{"bf16", "fp8"} {
		b.Run(mode, func(b *testing.B) {
			comms := inproc.Communicators(d)
			wrapped := make([]collective.Communicator, d)
			for r, c := range comms {
				wrapped[r] = c
				if mode == "fp8" {
					w, err := fp8grad.New(c, fp8grad.Config{})
					if err != nil {
						b.Fatal(err)
					}
					wrapped[r] = w
				}
			}
			defer func() {
				for _, c := range wrapped {
					c.Close()
				}
			}()
			srcs := make([]buffer.HostBuffer, d)
			dsts := make([]buffer.HostBuffer, d)
			for r := range d {
				rng := rand.New(rand.NewPCG(uint64(r), 1))
				h := make([]uint16, total)
				for i := range h {
					h[i] = bf16.FromFloat32(float32(rng.NormFloat64()))
				}
				srcs[r] = collective.ToBytes(h)
				dsts[r] = make(buffer.HostBuffer, 2*n)
			}
			b.SetBytes(2 * total)
			b.ReportAllocs()
			for b.Loop() {
				var wg sync.WaitGroup
				errs := make([]error, d)
				for r := range d {
					wg.Go(func() {
						errs[r] = collective.ReduceScatter(context.Background(), wrapped[r], dsts[r], srcs[r], buffer.BFloat16, collective.Avg)
					})
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			wire := 2.0 * float64(d-1) / float64(d)
			if mode == "fp8" {
				wire = float64((d-1)*fp8grad.PieceBytes(n, fp8grad.DefaultBlock)) / total
			}
			b.ReportMetric(wire, "wire-B/elem")
		})
	}
}
