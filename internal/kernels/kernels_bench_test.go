package kernels

import (
	"fmt"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// benchN is the element count of the benchmarks: 1 GiB of float32, several
// times the L2 cache.
const benchN = 1 << 28

// benchSetup loads every variant and allocates a float32 source (filled with
// varied values) and a destination of dstBytes bytes per element.
func benchSetup(b *testing.B, dstBytes int) (*cuda.Stream, []*Set, cuda.DevicePtr, cuda.DevicePtr) {
	d, sets := loadAll(b)
	s := cudatest.Stream(b, d)
	src, dst := cudatest.Alloc(b, d, 4*benchN), cudatest.Alloc(b, d, dstBytes*benchN)
	// Bit patterns 0x3c000000 + i*64: finite values from 2^-7 upwards.
	must(b, sets[0].FillIota(s, src, 0x3c000000, benchN))
	must(b, s.Synchronize())
	return s, sets, src, dst
}

// BenchmarkCastScaled times the scaled cast with amax: 5 bytes per element
// moved (float32 read, byte written).
func BenchmarkCastScaled(b *testing.B) {
	s, sets, src, dst := benchSetup(b, 1)
	amax := cudatest.Alloc(b, sets[0].Device(), 4)
	for _, k := range sets {
		for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
			b.Run(k.v.String()+"_"+f.String(), func(b *testing.B) {
				b.SetBytes(5 * benchN)
				b.ReportAllocs()
				for b.Loop() {
					must(b, k.CastScaled(s, dst, src, benchN, 0.5, f, amax))
					must(b, s.Synchronize())
				}
			})
		}
	}
}

// BenchmarkEncodeFP8 times the unscaled encode: 5 bytes per element.
func BenchmarkEncodeFP8(b *testing.B) {
	s, sets, src, dst := benchSetup(b, 1)
	for _, k := range sets {
		b.Run(k.v.String(), func(b *testing.B) {
			b.SetBytes(5 * benchN)
			for b.Loop() {
				must(b, k.EncodeFP8(s, dst, src, benchN, fp8.E4M3))
				must(b, s.Synchronize())
			}
		})
	}
}

// BenchmarkCopyDtoD times a device-to-device copy of the benchmark's source
// (bytes read plus bytes written), the ceiling the kernels are measured
// against.
func BenchmarkCopyDtoD(b *testing.B) {
	s, _, src, dst := benchSetup(b, 4)
	b.SetBytes(2 * 4 * benchN)
	for b.Loop() {
		must(b, s.CopyDtoD(dst, src, 4*benchN))
		must(b, s.Synchronize())
	}
}

// BenchmarkTransposeFP8 times the FP8 transpose at the GPT example's shapes
// (tokens x width of its linear layers' inputs; 124M and 1.3B) by CUDA events
// (gpu-us/op), with GB/s of the bytes read and written.
func BenchmarkTransposeFP8(b *testing.B) {
	d, sets := loadAll(b)
	s := cudatest.Stream(b, d)
	for _, sh := range [][2]int{{16384, 768}, {16384, 3072}, {8192, 2048}, {8192, 8192}} {
		rows, cols := sh[0], sh[1]
		src, dst := cudatest.Alloc(b, d, rows*cols), cudatest.Alloc(b, d, rows*cols)
		must(b, sets[0].FillIota(s, src, 0x3c000000, rows*cols/4))
		for _, k := range sets {
			b.Run(fmt.Sprintf("%v/%dx%d", k.v, rows, cols), func(b *testing.B) {
				gpuBench(b, d, s, 2*rows*cols, func() error { return k.TransposeFP8(s, dst, src, rows, cols) })
			})
		}
	}
}

// gpuBench times queue on s by CUDA events (cudatest.GPUTime) and reports
// gpu-us/op and GB/s of the bytes it moves per call.
func gpuBench(b *testing.B, d *cuda.Device, s *cuda.Stream, bytes int, queue func() error) {
	per := cudatest.GPUTime(b, d, s, queue)
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "gpu-us/op")
	b.ReportMetric(float64(bytes)/per.Seconds()/1e9, "GB/s")
}
