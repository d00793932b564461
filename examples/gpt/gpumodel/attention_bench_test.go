package gpumodel

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/distopt/distopt/internal/cublaslt"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// attnBuffers are the device buffers of one attention layer.
type attnBuffers struct{ qkv, dy, y, dqkv, p, ds cuda.DevicePtr }

func newAttnBuffers(b *testing.B, e *attnEnv, batch, seq, heads, d int) attnBuffers {
	h, rows, pn := heads*d, batch*seq, batch*heads*seq*seq
	r := rand.New(rand.NewPCG(1, 2))
	var x attnBuffers
	x.qkv, _ = e.upload(b, r, rows*3*h, 1)
	x.dy, _ = e.upload(b, r, rows*h, 1)
	x.y, x.dqkv = cudatest.Alloc(b, e.d, 4*rows*h), cudatest.Alloc(b, e.d, 4*rows*3*h)
	x.p, x.ds = cudatest.Alloc(b, e.d, 4*pn), cudatest.Alloc(b, e.d, 4*pn)
	return x
}

// causalFLOPs is the useful work of causal attention's forward pass,
// 2·batch·heads·seq²·d: the two GEMMs q·kᵀ and p·v (2·seq²·d each per
// head) over the lower half of the scores. The backward pass does twice
// that (four GEMMs) without recomputation. The GEMMs here compute the full
// square, so the work executed is twice the count reported.
func causalFLOPs(batch, seq, heads, d int) float64 {
	return 2 * float64(batch) * float64(heads) * float64(seq) * float64(seq) * float64(d)
}

// report sets ms per pass and achieved causal TFLOP/s.
func report(b *testing.B, start time.Time, flops float64) {
	per := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric(per*1e3, "ms/op")
	b.ReportMetric(flops/per/1e12, "causal-TFLOP/s")
}

// BenchmarkAttention times the GEMM-based attention (forward, and forward
// plus backward) at the 124M shape (batch 8, seq 1024, 12 heads of 64) and
// the 1.3B shape (batch 4, seq 2048, 16 heads of 128), each pass waited
// for; TFLOP/s count causal FLOPs (fwd 2·B·H·T²·d, fwd+bwd 6·B·H·T²·d).
// FP32 (exact products) runs at the 124M shape for comparison with the
// model's TF32, and the in-place layout for comparison with the packed
// one.
func BenchmarkAttention(b *testing.B) {
	e := newAttnEnv(b)
	cases := []struct {
		name                 string
		batch, seq, heads, d int
		compute              cublaslt.ComputeType
		layout               attnLayout
	}{
		{"124M/TF32/packed", 8, 1024, 12, 64, cublaslt.Compute32FFastTF32, attnPacked},
		{"124M/TF32/in-place", 8, 1024, 12, 64, cublaslt.Compute32FFastTF32, attnInPlace},
		{"124M/FP32/packed", 8, 1024, 12, 64, cublaslt.Compute32F, attnPacked},
		{"1.3B/TF32/packed", 4, 2048, 16, 128, cublaslt.Compute32FFastTF32, attnPacked},
		{"1.3B/TF32/in-place", 4, 2048, 16, 128, cublaslt.Compute32FFastTF32, attnInPlace},
		{"small/TF32/packed", 2, 256, 12, 64, cublaslt.Compute32FFastTF32, attnPacked},
	}
	for _, c := range cases {
		x := newAttnBuffers(b, e, c.batch, c.seq, c.heads, c.d)
		a, err := newAttention(e.k, c.batch, c.seq, c.heads*c.d, c.heads, c.compute, c.layout)
		if err != nil {
			b.Fatal(err)
		}
		fl := causalFLOPs(c.batch, c.seq, c.heads, c.d)
		for _, bwd := range []bool{false, true} {
			name := c.name + "/fwd"
			if bwd {
				name, fl = c.name+"/fwd+bwd", 3*fl
			}
			b.Run(name, func(b *testing.B) {
				start := time.Now()
				for b.Loop() {
					if err := a.forward(e.s, x.y, x.p, x.qkv); err != nil {
						b.Fatal(err)
					}
					if bwd {
						if err := a.backward(e.s, x.dqkv, x.ds, x.dy, x.p, x.qkv); err != nil {
							b.Fatal(err)
						}
					}
					if err := e.s.Synchronize(); err != nil {
						b.Fatal(err)
					}
				}
				report(b, start, fl)
			})
		}
		if err := a.close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAttentionNaive times the reference-order kernels of gpt.cu
// (GPTAttention and GPTAttentionGrad, one warp per row) at the small shape
// of BenchmarkAttention (batch 2, seq 256, 12 heads of 64), for comparison.
func BenchmarkAttentionNaive(b *testing.B) {
	e := newAttnEnv(b)
	const batch, seq, heads, d = 2, 256, 12, 64
	x := newAttnBuffers(b, e, batch, seq, heads, d)
	scale := attnScaleFor(d)
	fl := causalFLOPs(batch, seq, heads, d)
	for _, bwd := range []bool{false, true} {
		name := "small/fwd"
		if bwd {
			name, fl = "small/fwd+bwd", 3*fl
		}
		b.Run(name, func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				if err := e.k.GPTAttention(e.s, x.y, x.p, x.qkv, batch, seq, heads*d, heads, scale); err != nil {
					b.Fatal(err)
				}
				if bwd {
					if err := e.k.GPTAttentionGrad(e.s, x.dqkv, x.ds, x.dy, x.p, x.qkv, batch, seq, heads*d, heads, scale); err != nil {
						b.Fatal(err)
					}
				}
				if err := e.s.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			report(b, start, fl)
		})
	}
}
