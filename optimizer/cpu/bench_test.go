package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer/backend"
)

// benchCase is one configuration of the update benchmarks: a shard holding
// a single parameter of one mode.
type benchCase struct {
	name   string
	rule   backend.Rule
	mt, gt buffer.DType
	mode   backend.Mode
	hp     buffer.DType // ModeHighPrecision
}

// bytes is the minimum number of bytes an update of n elements moves:
// master read and written, each moment read and written, the gradient read,
// and the mode's output written (FP8 bytes, or the HP copy).
func (bc benchCase) bytes(n int) int64 {
	per := 8 + bc.gt.Size()
	switch bc.rule {
	case backend.RuleAdamW:
		per += 4 * bc.mt.Size()
	case backend.RuleSGD:
		per += 2 * bc.mt.Size()
	}
	switch bc.mode {
	case backend.ModeTensorDelayed, backend.ModeBlock:
		per++
	case backend.ModeHighPrecision:
		per += bc.hp.Size()
	}
	return int64(per) * int64(n)
}

// args builds the case's arguments over n elements for be.
func (bc benchCase) args(be *Backend, n int) *backend.UpdateArgs {
	alloc := func(bytes int) buffer.Buffer { b, _ := be.Alloc(bytes); return b }
	seg := backend.Segment{Off: 0, Len: n, Mode: bc.mode, Factors: backend.Factors{StepSize: 1e-3, Shrink: 0.9999}, Cols: 1024}
	a := &backend.UpdateArgs{Rule: bc.rule, N: n, MomentType: bc.mt, GradType: bc.gt,
		Master: alloc(4 * n), M: alloc(bc.mt.Size() * n), Grad: alloc(bc.gt.Size() * n),
		FP8: alloc(n), Amax: alloc(4 * (n/(128*128) + 8)), Scale: alloc(4),
		Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, Segments: []backend.Segment{seg}}
	if bc.rule == backend.RuleAdamW {
		a.V = alloc(bc.mt.Size() * n)
	}
	switch bc.mode {
	case backend.ModeTensorDelayed:
		a.Recipe.Scaling = fp8.TensorDelayed
	case backend.ModeBlock:
		a.Recipe.Scaling = fp8.Block1x128
		a.BlockScales = alloc(4 * (n/128 + 1))
	case backend.ModeTile:
		a.Recipe.Scaling = fp8.Block128x128
	case backend.ModeHighPrecision:
		a.HP, a.HPType = alloc(bc.hp.Size()*n), bc.hp
	}
	a.Hyper = backend.Hyper{GradScale: 1, Beta1: 0.9, Beta2: 0.999, OneMinusBeta1: 0.1, OneMinusBeta2: 0.001, Eps: 1e-8, SqrtVCorrection: 1, Momentum: 0.9}
	if bc.rule == backend.RuleSGD {
		a.Segments[0].WeightDecay = 1e-4
	}
	g := hostBuf(a.Grad)
	for i := range n {
		x := float32(i%1000-500) * 1e-4
		if bc.gt == buffer.BFloat16 {
			binary.LittleEndian.PutUint16(g[2*i:], bf16.FromFloat32(x))
		} else {
			binary.LittleEndian.PutUint32(g[4*i:], math.Float32bits(x))
		}
	}
	f32s(a.Scale)[0] = 1
	return a
}

// benchUpdateArgs builds one shard of n elements holding a single FP8
// parameter with per-tensor current scaling, AdamW, FP32 moments and BF16
// gradients.
func benchUpdateArgs(be *Backend, n int) *backend.UpdateArgs {
	return benchCase{rule: backend.RuleAdamW, mt: buffer.Float32, gt: buffer.BFloat16, mode: backend.ModeTensorCurrent}.args(be, n)
}

// benchWorkers is the goroutine counts the benchmarks run with.
func benchWorkers() []int {
	if p := runtime.GOMAXPROCS(0); p > 1 {
		return []int{1, p}
	}
	return []int{1}
}

// BenchmarkUpdate times the fused AdamW update + amax and then the cast of a
// 2^22-element shard, with 1 goroutine and with every core. Bytes are the
// minimum moved: master, m, v read and written (24), BF16 gradient read (2),
// master read again and FP8 written by the cast (5). BenchmarkCopy/31B is
// the memmove of as many bytes.
func BenchmarkUpdate(b *testing.B) {
	const n = 1 << 22
	for _, w := range benchWorkers() {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			be := New(w)
			a := benchUpdateArgs(be, n)
			c := &backend.CastArgs{N: n, Master: a.Master, Segments: a.Segments, Format: fp8.E4M3, FP8: a.FP8, Scale: a.Scale}
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

// BenchmarkUpdateCases times Update alone (no cast) over 2^22 elements for
// the common rules, moment and gradient types and modes. Bytes are those of
// benchCase.bytes; BenchmarkCopy is the floor for the same byte rate.
func BenchmarkUpdateCases(b *testing.B) {
	const n = 1 << 22
	f32, bf16 := buffer.Float32, buffer.BFloat16
	cases := []benchCase{
		{"adamw/m=f32/g=bf16/current", backend.RuleAdamW, f32, bf16, backend.ModeTensorCurrent, 0},
		{"adamw/m=f32/g=f32/current", backend.RuleAdamW, f32, f32, backend.ModeTensorCurrent, 0},
		{"adamw/m=bf16/g=bf16/current", backend.RuleAdamW, bf16, bf16, backend.ModeTensorCurrent, 0},
		{"adamw/m=bf16/g=f32/current", backend.RuleAdamW, bf16, f32, backend.ModeTensorCurrent, 0},
		{"adamw/m=f32/g=bf16/delayed", backend.RuleAdamW, f32, bf16, backend.ModeTensorDelayed, 0},
		{"adamw/m=f32/g=bf16/hp=bf16", backend.RuleAdamW, f32, bf16, backend.ModeHighPrecision, bf16},
		{"adamw/m=f32/g=bf16/block1x128", backend.RuleAdamW, f32, bf16, backend.ModeBlock, 0},
		{"adamw/m=f32/g=bf16/tile", backend.RuleAdamW, f32, bf16, backend.ModeTile, 0},
		{"sgd/m=f32/g=bf16/current", backend.RuleSGD, f32, bf16, backend.ModeTensorCurrent, 0},
		{"sgd/m=bf16/g=f32/delayed", backend.RuleSGD, bf16, f32, backend.ModeTensorDelayed, 0},
	}
	for _, bc := range cases {
		for _, w := range benchWorkers() {
			b.Run(fmt.Sprintf("%s/workers=%d", bc.name, w), func(b *testing.B) {
				be := New(w)
				a := bc.args(be, n)
				b.SetBytes(bc.bytes(n))
				b.ReportAllocs()
				for b.Loop() {
					if err := be.Update(a); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCopy is the hardware floor of the update benchmarks: a memmove
// moving as many bytes (half read, half written) per element as
// BenchmarkUpdate (31) and the AdamW FP32-moment current-scaling case of
// BenchmarkUpdateCases (26), over 2^22 elements, split in contiguous halves
// when there are two goroutines.
func BenchmarkCopy(b *testing.B) {
	const n = 1 << 22
	for _, per := range []int{31, 26} {
		for _, w := range benchWorkers() {
			b.Run(fmt.Sprintf("%dB/workers=%d", per, w), func(b *testing.B) {
				half := per * n / 2
				src, dst := make([]byte, half), make([]byte, half)
				for i := range src {
					src[i] = byte(i)
				}
				copy(dst, src) // fault the pages in before timing
				b.SetBytes(int64(2 * half))
				b.ReportAllocs()
				for b.Loop() {
					var wg sync.WaitGroup
					for k := range w {
						lo, hi := k*half/w, (k+1)*half/w
						wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
					}
					wg.Wait()
				}
			})
		}
	}
}

// BenchmarkNaiveAdamW is the plain loop of the same update in float32
// without the backend, the amax or the cast, for comparison.
func BenchmarkNaiveAdamW(b *testing.B) {
	const n = 1 << 22
	p, m, v, g := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	h := backend.Hyper{GradScale: 1, Beta1: 0.9, Beta2: 0.999, OneMinusBeta1: 0.1, OneMinusBeta2: 0.001, Eps: 1e-8, SqrtVCorrection: 1}
	b.SetBytes(28 * n)
	for b.Loop() {
		for i := range p {
			p[i], m[i], v[i] = backend.AdamWElem(p[i], m[i], v[i], g[i], &h, 1e-3, 0.9999)
		}
	}
}

// BenchmarkGradStats times the exact sum of squares of a BF16 gradient shard.
func BenchmarkGradStats(b *testing.B) {
	const n = 1 << 22
	be := New(0)
	a := benchUpdateArgs(be, n)
	stats, _ := be.Alloc(8 * backend.StatsLen)
	b.SetBytes(2 * n)
	for b.Loop() {
		if err := be.GradStats(stats, a.Grad, buffer.BFloat16, n); err != nil {
			b.Fatal(err)
		}
	}
}
