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

// BenchmarkForwardBias times the forward products of the 1.3B GPT's qkv
// (2048 -> 6144) and fc (2048 -> 8192) layers at 8192 tokens (the
// example's default micro-batch) per recipe, writing float32 (what
// examples/gpt's default forward writes, before a separate pass adds the
// bias and rounds to bfloat16), bfloat16, and bfloat16 with the bias in
// cuBLASLt's epilogue (BF16Bias). bf16-bias over float32 is the
// product's share of the epilogue's gain; the bias pass it saves is timed
// by examples/gpt/gpumodel's BenchmarkMicroBatch.
func BenchmarkForwardBias(b *testing.B) {
	e := newEngine(b)
	const T, in = 8192, 2048
	for _, r := range []struct {
		name   string
		w, act Layout
	}{{"per-tensor", PerTensor, PerTensor}, {"tiles128-rows128", Tiles128, Rows128}} {
		x := benchOperand(b, e, T, in, fp8.E4M3, r.act, false)
		for _, layer := range []struct {
			name string
			out  int
		}{{"qkv", 6144}, {"fc", 8192}} {
			out := layer.out
			w := benchOperand(b, e, out, in, fp8.E4M3, r.w, false)
			y, bias := cuda.DevicePtr(devAlloc(b, e.d, 4*T*out)), cuda.DevicePtr(devAlloc(b, e.d, 2*out))
			must(b, e.s.Memset32(icuda.DevicePtr(bias), 0x3c003c00, out/2)) // 2^-7
			for _, o := range []struct {
				name string
				out  Output
			}{{"float32", Output{Data: y, Type: buffer.Float32}}, {"bf16", BF16(y)}, {"bf16-bias", BF16Bias(y, bias)}} {
				b.Run(fmt.Sprintf("%s/%s/%s", r.name, layer.name, o.name), func(b *testing.B) {
					if _, err := e.Forward(o.out, x, w); err != nil { // plan outside the timing
						b.Fatal(err)
					}
					must(b, e.s.Synchronize())
					for b.Loop() {
						if _, err := e.Forward(o.out, x, w); err != nil {
							b.Fatal(err)
						}
					}
					must(b, e.s.Synchronize())
					b.ReportMetric(2*T*in*float64(out)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
				})
			}
		}
	}
}
