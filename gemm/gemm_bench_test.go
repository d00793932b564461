package gemm

import (
	"fmt"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
	icuda "github.com/distopt/distopt/internal/cuda"
)

// BenchmarkProducts times the three products of the 1.3B GPT's fc1 layer
// (16384 tokens, 2048 -> 8192) per recipe and reports TFLOP/s (2*T*in*out
// per product; the data gradient's weight transpose included). cmd/distopt-bench-gemm covers
// every shape, the memory check and the PyTorch comparison.
func BenchmarkProducts(b *testing.B) {
	e := newEngine(b)
	const T, in, out = 16384, 2048, 8192
	for _, r := range []struct {
		name   string
		w, act Layout
	}{{"per-tensor", PerTensor, PerTensor}, {"tiles128-rows128", Tiles128, Rows128}} {
		w := benchOperand(b, e, out, in, fp8.E4M3, r.w, false)
		x := benchOperand(b, e, T, in, fp8.E4M3, r.act, false)
		dy := benchOperand(b, e, T, out, fp8.E5M2, r.act, false)
		xT := benchOperand(b, e, T, in, fp8.E4M3, r.act, true)
		dyT := benchOperand(b, e, T, out, fp8.E5M2, r.act, true)
		y, dx, dw := devAlloc(b, e.d, 2*T*out), devAlloc(b, e.d, 2*T*in), devAlloc(b, e.d, 4*out*in)
		products := []struct {
			name string
			run  func() (Result, error)
		}{
			{"forward", func() (Result, error) { return e.Forward(BF16(cuda.DevicePtr(y)), x, w) }},
			{"dgrad", func() (Result, error) { return e.DGrad(BF16(cuda.DevicePtr(dx)), dy, w) }},
			{"wgrad", func() (Result, error) {
				return e.WGrad(Output{Data: cuda.DevicePtr(dw), Type: buffer.Float32, Accumulate: true}, dyT, xT)
			}},
		}
		for _, p := range products {
			b.Run(fmt.Sprintf("%s/%s", r.name, p.name), func(b *testing.B) {
				if _, err := p.run(); err != nil { // plan and scratch outside the timing
					b.Fatal(err)
				}
				must(b, e.s.Synchronize())
				for b.Loop() {
					if _, err := p.run(); err != nil {
						b.Fatal(err)
					}
				}
				must(b, e.s.Synchronize())
				b.ReportMetric(2*T*in*out*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
			})
		}
	}
}

// benchOperand allocates an operand whose codes are all 0x38 (1.0 in E4M3,
// 0.5 in E5M2) with scale_inv 1. Constant data toggles fewer bits than the
// random codes of cmd/distopt-bench-gemm, which draws more power: expect
// somewhat higher figures here.
func benchOperand(b *testing.B, e *Engine, rows, cols int, f fp8.Format, l Layout, transposed bool) Operand {
	o, err := AllocOperand(e.device(), rows, cols, f, l, transposed)
	must(b, err)
	b.Cleanup(func() { FreeOperand(e.device(), o) })
	sr, sc := o.stored()
	must(b, e.s.Memset8(icuda.DevicePtr(o.Data), 0x38, rows*cols))
	must(b, e.s.Memset32(icuda.DevicePtr(o.ScaleInv), 0x3f800000, ScaleBytes(sr, sc, l)/4))
	return o
}
