package kernels

import (
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"testing"
	"time"

	"github.com/distopt/distopt/internal/cuda"
)

// BenchmarkGradStats times GradStats and the first kernel (v1, the
// baseline kept in gradstats.cu) over 2^28 gradients, bfloat16 and float32,
// of three kinds: typical (Gaussian, sigma 1e-3), scaled (16 tensors, each
// 8 times the one before) and wide (every exponent: squares from subnormal
// to past float32, an adversary of any window). Besides MB/s of gradient
// read it reports GB/s and that figure as a percentage of the bandwidth of a
// device-to-device copy of the same bytes (read plus written) measured in
// the same run (the copy/ sub-benchmarks).
func BenchmarkGradStats(b *testing.B) {
	d, sets := loadAll(b)
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
		for _, kind := range []struct{ name, gen string }{{"typical", "normal"}, {"scaled", "scaledup"}, {"wide", "exponents"}} {
			must(b, rig.s.Upload(rig.grad, gradBytes(hugeGrad(benchN, bf, kind.gen), bf)))
			for _, impl := range []string{"new", "v1"} {
				launch := func(st, g cuda.DevicePtr, n int) error { return k.GradStats(rig.s, st, g, n, bf) }
				if impl == "v1" {
					launch = rig.v1(bf)
				}
				b.Run(typeName(bf)+"/"+kind.name+"/"+impl, func(b *testing.B) {
					b.SetBytes(int64(bytes))
					for b.Loop() {
						must(b, launch(rig.stats, rig.grad, benchN))
						must(b, rig.s.Synchronize())
					}
					reportGBs(b, bytes, copyGBs[bf])
				})
			}
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
