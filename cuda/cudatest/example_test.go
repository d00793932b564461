package cudatest_test

import (
	"fmt"
	"testing"

	"github.com/distopt/distopt/cuda/cudatest"
)

// ExampleGPUTime times a device-to-device copy of 64 MiB by CUDA events,
// as a benchmark would (this one through testing.Benchmark, so that the
// example is one function); on a machine without a GPU the benchmark
// skips and reports no time. Not run by go test: its output depends on
// the card.
func ExampleGPUTime() {
	const n = 64 << 20
	r := testing.Benchmark(func(b *testing.B) {
		d := cudatest.Require(b)
		s := cudatest.Stream(b, d)
		src, dst := cudatest.Alloc(b, d, n), cudatest.Alloc(b, d, n)
		per := cudatest.GPUTime(b, d, s, func() error { return s.CopyDtoD(dst, src, n) })
		b.ReportMetric(2*n/per.Seconds()/1e9, "GB/s")
	})
	fmt.Printf("%.0f GB/s\n", r.Extra["GB/s"])
}
