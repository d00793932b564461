package optimizer

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
)

// benchUpdateArgs builds one shard of n elements holding a single FP8
// parameter with per-tensor current scaling.
func benchUpdateArgs(be *CPU, n int) *UpdateArgs {
	alloc := func(bytes int) collective.Buffer { b, _ := be.Alloc(bytes); return b }
	a := &UpdateArgs{Rule: RuleAdamW, N: n, MomentType: collective.Float32, GradType: collective.BFloat16,
		Master: alloc(4 * n), M: alloc(4 * n), V: alloc(4 * n), Grad: alloc(2 * n), FP8: alloc(n),
		Amax: alloc(4), Scale: alloc(4), Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
		Segments: []Segment{{Off: 0, Len: n, Mode: ModeTensorCurrent, StepSize: 1e-3, Decay: 0.9999}}}
	a.Hyper = Hyper{GradScale: 1, Beta1: 0.9, Beta2: 0.999, OneMinusBeta1: 0.1, OneMinusBeta2: 0.001, Eps: 1e-8, RBC2: 1}
	g := u16s(a.Grad)
	for i := range g {
		g[i] = fp8.BF16FromFloat32(float32(i%1000-500) * 1e-4)
	}
	return a
}

// BenchmarkUpdate times the fused AdamW update + amax and then the cast of a
// 2^22-element shard, with 1 goroutine and with every core. Bytes are the
// minimum moved: master, m, v read and written (24), BF16 gradient read (2),
// master read again and FP8 written by the cast (5).
func BenchmarkUpdate(b *testing.B) {
	const n = 1 << 22
	for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			be := NewCPU(w)
			a := benchUpdateArgs(be, n)
			c := &CastArgs{N: n, Master: a.Master, Segments: a.Segments, Format: fp8.E4M3, FP8: a.FP8, Scale: a.Scale}
			f32s(a.Scale)[0] = 1
			b.SetBytes(31 * n)
			b.ReportAllocs()
			for b.Loop() {
				if err := be.Update(a); err != nil {
					b.Fatal(err)
				}
				if err := be.Cast(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNaiveAdamW is the plain loop of the same update in float32
// without the backend, the amax or the cast, for comparison.
func BenchmarkNaiveAdamW(b *testing.B) {
	const n = 1 << 22
	p, m, v, g := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	h := Hyper{GradScale: 1, Beta1: 0.9, Beta2: 0.999, OneMinusBeta1: 0.1, OneMinusBeta2: 0.001, Eps: 1e-8, RBC2: 1}
	b.SetBytes(28 * n)
	for b.Loop() {
		for i := range p {
			p[i], m[i], v[i] = AdamWElem(p[i], m[i], v[i], g[i], &h, 1e-3, 0.9999)
		}
	}
}

// BenchmarkGradStats times the exact sum of squares of a BF16 gradient shard.
func BenchmarkGradStats(b *testing.B) {
	const n = 1 << 22
	be := NewCPU(0)
	a := benchUpdateArgs(be, n)
	stats, _ := be.Alloc(8 * StatsLen)
	b.SetBytes(2 * n)
	for b.Loop() {
		if err := be.GradStats(stats, a.Grad, collective.BFloat16, n); err != nil {
			b.Fatal(err)
		}
	}
}
