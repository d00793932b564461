package gpu

import (
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/optimizer/backend"
)

// BenchmarkGradStats times the exact sum of squares and non-finite count of
// 2^28 bfloat16 gradients of a realistic spread (Gaussian, a few binades of
// scale across tensors), in GB/s of gradient read.
func BenchmarkGradStats(b *testing.B) {
	be, err := New(0)
	cudatest.Unavailable(b, err)
	defer be.Close()
	const n = 1 << 28
	host := make([]uint16, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range host {
		scale := float64(uint(1) << (i >> 24)) // 16 tensors of growing scale
		host[i] = bf16.FromFloat32(float32(r.NormFloat64() * 1e-4 * scale))
	}
	grad, err := be.Alloc(2 * n)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Free(grad)
	if err := be.Write(grad, 0, collective.ToBytes(host)); err != nil {
		b.Fatal(err)
	}
	stats, err := be.Alloc(8 * backend.StatsLen)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Free(stats)
	b.SetBytes(2 * n)
	for b.Loop() {
		if err := be.GradStats(stats, grad, buffer.BFloat16, n); err != nil {
			b.Fatal(err)
		}
		if err := be.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}
