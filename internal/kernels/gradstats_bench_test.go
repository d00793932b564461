package kernels

import (
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"testing"
	"time"

	"github.com/distopt/distopt/internal/cuda"
)

// BenchmarkGradStats times GradStats in every configuration (named by its
// suffix) and the first kernel (v1, the baseline kept in gradstats.cu) over
// 2^28 gradients, bfloat16 and float32, of three kinds: typical (Gaussian,
// sigma 1e-3), scaled (16 tensors, each 8 times the one before) and wide
// (every exponent: squares from subnormal to past float32, an adversary of
// any window). Besides MB/s of gradient read it reports GB/s and that
// figure as a percentage of the bandwidth of a device-to-device copy of the
// same bytes (read plus written) measured in the same run (the copy/
// sub-benchmarks).
func BenchmarkGradStats(b *testing.B) {
	d, sets := loadGradStats(b)
	k := sets[len(sets)-1]
	rig := newGSRig(b, d, k, 4*benchN)
	dst := cudatest.Alloc(b, d, 4*benchN)
	copyGBs := map[bool]float64{}
	for _, bf := range []bool{true, false} {
		size := 4
		if bf {
			size = 2
		}
		bytes := size * benchN
		b.Run("copy/"+typeName(bf), func(b *testing.B) {
			b.SetBytes(int64(2 * bytes))
			for b.Loop() {
				must(b, rig.s.CopyDtoD(dst, rig.grad, bytes))
				must(b, rig.s.Synchronize())
			}
			copyGBs[bf] = reportGBs(b, 2*bytes, 0)
		})
		impls := map[string]func(st, g cuda.DevicePtr, n int) error{"v1": rig.v1(bf)}
		names := []string{"v1"}
		for _, c := range gradStatsConfigs {
			impls[c.suffix[1:]] = rig.with(c, bf)
			names = append(names, c.suffix[1:])
		}
		for _, kind := range []struct{ name, gen string }{{"typical", "normal"}, {"scaled", "scaledup"}, {"wide", "exponents"}} {
			// The gradient is made inside the sub-benchmark: only the kinds
			// a -test.bench pattern selects are generated.
			b.Run(typeName(bf)+"/"+kind.name, func(b *testing.B) {
				must(b, rig.s.Upload(rig.grad, gradBytes(hugeGrad(benchN, bf, kind.gen), bf)))
				for _, impl := range names {
					launch := impls[impl]
					b.Run(impl, func(b *testing.B) {
						b.SetBytes(int64(bytes))
						for b.Loop() {
							must(b, launch(rig.stats, rig.grad, benchN))
							must(b, rig.s.Synchronize())
						}
						reportGBs(b, bytes, copyGBs[bf])
					})
				}
			})
		}
	}
}

// reportGBs reports the GB/s of moving bytes per operation and, when
// copyGBs is known, their percentage of it; it returns the GB/s.
func reportGBs(b *testing.B, bytes int, copyGBs float64) float64 {
	per := b.Elapsed() / time.Duration(b.N)
	gbs := float64(bytes) / per.Seconds() / 1e9
	b.ReportMetric(gbs, "GB/s")
	b.ReportMetric(float64(per.Microseconds()), "us/op")
	if copyGBs > 0 {
		b.ReportMetric(100*gbs/copyGBs, "%copy")
	}
	return gbs
}

// gptShard is the gradient shard of one rank of the 1.42B GPT at d = 2:
// 709M bfloat16 elements in 22 buckets.
const (
	gptShard   = 709_000_000
	gptBuckets = 22
	queued     = 8
)

// BenchmarkGradStatsTable times the statistics of the 1.42B GPT's shard at
// d = 2 (gptShard typical bfloat16 gradients in gptBuckets buckets of equal
// size at unaligned element offsets) in each configuration: table is one
// GradStatsTable launch over every bucket, buckets one GradStats call per
// bucket (the launches the optimizer made before), against a copy of the
// same bytes measured in the same run. Each of those waits for the device
// after every operation, so its time holds a hand-over and a wait besides
// the kernels; table-queued and copy-queued queue `queued` operations and
// wait once, the time per operation as a step sees it (the statistics
// queued between the reduce-scatter and the update).
func BenchmarkGradStatsTable(b *testing.B) {
	d, sets := loadGradStats(b)
	k := sets[len(sets)-1]
	const bytes = 2 * gptShard
	rig := newGSRig(b, d, k, bytes+64*gptBuckets)
	dst := cudatest.Alloc(b, d, bytes)
	var copyGBs, copyQueuedGBs float64
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(2 * bytes)
		for b.Loop() {
			must(b, rig.s.CopyDtoD(dst, rig.grad, bytes))
			must(b, rig.s.Synchronize())
		}
		copyGBs = reportGBs(b, 2*bytes, 0)
	})
	b.Run("copy-queued", func(b *testing.B) {
		b.SetBytes(2 * bytes * queued)
		for b.Loop() {
			for range queued {
				must(b, rig.s.CopyDtoD(dst, rig.grad, bytes))
			}
			must(b, rig.s.Synchronize())
		}
		copyQueuedGBs = reportGBs(b, 2*bytes*queued, 0)
	})
	must(b, rig.s.Upload(rig.grad, gradBytes(hugeGrad(gptShard, true, "normal"), true)))
	var segs []GradSegment
	off := 0
	for i := range gptBuckets {
		n := gptShard/gptBuckets + 3 - 6*(i%2) // odd sizes: unaligned buckets
		if i == gptBuckets-1 {
			n = gptShard - off
		}
		segs = append(segs, GradSegment{Ptr: rig.grad.Add(2 * off), N: n})
		off += n
	}
	for _, c := range gradStatsConfigs {
		tab, err := k.newGradStatsTable(c, rig.s, segs, true)
		must(b, err)
		b.Run("table/"+c.suffix[1:], func(b *testing.B) {
			b.SetBytes(bytes)
			for b.Loop() {
				must(b, tab.Launch(rig.s, rig.stats))
				must(b, rig.s.Synchronize())
			}
			reportGBs(b, bytes, copyGBs)
		})
		b.Run("table-queued/"+c.suffix[1:], func(b *testing.B) {
			b.SetBytes(bytes * queued)
			for b.Loop() {
				for range queued {
					must(b, tab.Launch(rig.s, rig.stats))
				}
				must(b, rig.s.Synchronize())
			}
			reportGBs(b, bytes*queued, copyQueuedGBs)
		})
		must(b, tab.Free())
		b.Run("buckets/"+c.suffix[1:], func(b *testing.B) {
			b.SetBytes(bytes)
			for b.Loop() {
				for _, sg := range segs {
					must(b, k.gradStatsWith(c, rig.s, rig.stats, sg.Ptr, sg.N, true))
				}
				must(b, rig.s.Synchronize())
			}
			reportGBs(b, bytes, copyGBs)
		})
	}
}
