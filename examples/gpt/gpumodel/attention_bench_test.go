package gpumodel

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
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

// timePasses runs pass (queue and wait for one pass) once untimed, so that
// the libraries' kernels are loaded (CUDA loads them lazily, on first
// use, for milliseconds each), then as often as b.Loop says, and reports
// ms per pass and the achieved causal TFLOP/s for flops per pass.
func timePasses(b *testing.B, pass func() error, flops float64) {
	if err := pass(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for b.Loop() {
		if err := pass(); err != nil {
			b.Fatal(err)
		}
	}
	per := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric(per*1e3, "ms/op")
	b.ReportMetric(flops/per/1e12, "causal-TFLOP/s")
}

// BenchmarkAttention times the GEMM-based attention (forward, and forward
// plus backward) at the 124M shape (batch 8, seq 1024, 12 heads of 64) and
// the 1.3B shape (batch 4, seq 2048, 16 heads of 128), each pass waited
// for; TFLOP/s count causal FLOPs (fwd 2·B·H·T²·d, fwd+bwd 6·B·H·T²·d).
// FP32 (exact products) runs at the 124M shape, BF16 and the in-place
// layout at both, for comparison with the model's TF32 packed.
func BenchmarkAttention(b *testing.B) {
	e := newAttnEnv(b)
	cases := []struct {
		name                 string
		batch, seq, heads, d int
		prec                 attnPrecision
		layout               attnLayout
	}{
		{"124M", 8, 1024, 12, 64, attnTF32, attnPacked},
		{"124M", 8, 1024, 12, 64, attnBF16, attnPacked},
		{"124M", 8, 1024, 12, 64, attnTF32, attnInPlace},
		{"124M", 8, 1024, 12, 64, attnFP32, attnPacked},
		{"1.3B", 4, 2048, 16, 128, attnTF32, attnPacked},
		{"1.3B", 4, 2048, 16, 128, attnBF16, attnPacked},
		{"1.3B", 4, 2048, 16, 128, attnTF32, attnInPlace},
		{"small", 2, 256, 12, 64, attnTF32, attnPacked},
	}
	for _, c := range cases {
		x := newAttnBuffers(b, e, c.batch, c.seq, c.heads, c.d)
		a, err := newAttention(e.k, c.batch, c.seq, c.heads*c.d, c.heads, c.prec, c.layout)
		if err != nil {
			b.Fatal(err)
		}
		fl := causalFLOPs(c.batch, c.seq, c.heads, c.d)
		for _, bwd := range []bool{false, true} {
			name := fmt.Sprintf("%s/%v/%v/fwd", c.name, c.prec, c.layout)
			if bwd {
				name, fl = strings.TrimSuffix(name, "fwd")+"fwd+bwd", 3*fl
			}
			pass := func() error {
				if err := a.forward(e.s, x.y, x.p, x.qkv); err != nil {
					return err
				}
				if bwd {
					if err := a.backward(e.s, x.dqkv, x.ds, x.dy, x.p, x.qkv); err != nil {
						return err
					}
				}
				return e.s.Synchronize()
			}
			b.Run(name, func(b *testing.B) { timePasses(b, pass, fl) })
		}
		if err := a.close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFlashAttention times attention through the fused kernels
// (attnFlash: the bfloat16 copies of the heads, FlashForward, and for the
// backward the copies again and FlashBackward) at the shapes of
// BenchmarkAttention, each pass waited for; TFLOP/s count causal FLOPs as
// there (fwd 2·B·H·T²·d, fwd+bwd 6·B·H·T²·d; the backward's recomputation
// of the scores is not counted).
func BenchmarkFlashAttention(b *testing.B) {
	e := newAttnEnv(b)
	cases := []struct {
		name                 string
		batch, seq, heads, d int
	}{
		{"124M", 8, 1024, 12, 64},
		{"1.3B", 4, 2048, 16, 128},
		{"small", 2, 256, 12, 64},
	}
	for _, c := range cases {
		h, rows := c.heads*c.d, c.batch*c.seq
		r := rand.New(rand.NewPCG(1, 2))
		qkv, _ := e.upload(b, r, rows*3*h, 1)
		dy, _ := e.upload(b, r, rows*h, 1)
		y, dqkv := cudatest.Alloc(b, e.d, 4*rows*h), cudatest.Alloc(b, e.d, 4*rows*3*h)
		p := cudatest.Alloc(b, e.d, attnKeptBytes(c.batch, c.seq, h, c.heads, attnFlash))
		a, err := newAttention(e.k, c.batch, c.seq, h, c.heads, attnFlash, attnPacked)
		if err != nil {
			b.Fatal(err)
		}
		fl := causalFLOPs(c.batch, c.seq, c.heads, c.d)
		for _, bwd := range []bool{false, true} {
			name := c.name + "/flash/fwd"
			if bwd {
				name, fl = name+"+bwd", 3*fl
			}
			pass := func() error {
				if err := a.forward(e.s, y, p, qkv); err != nil {
					return err
				}
				if bwd {
					if err := a.backward(e.s, dqkv, 0, dy, p, qkv); err != nil {
						return err
					}
				}
				return e.s.Synchronize()
			}
			b.Run(name, func(b *testing.B) { timePasses(b, pass, fl) })
		}
		if err := a.close(); err != nil {
			b.Fatal(err)
		}
	}
}
