package kernels

import (
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
)

// The 124M shape of examples/gpt: 12 layers, hidden 768, FFN 3072, the
// byte-level vocabulary, micro-batches of 8 x 1024 tokens.
const (
	gbLayers = 12
	gbBatch  = 8
	gbSeq    = 1024
	gbRows   = gbBatch * gbSeq
	gbH      = 768
	gbF      = 3072
	gbVocab  = 256
)

// gptBench holds the buffers of BenchmarkGPT: activations of up to
// rows x FFN floats, parameters and gradients of up to FFN entries.
type gptBench struct {
	s                      *cuda.Stream
	k                      *Set
	a, c, e                cuda.DevicePtr // [rows, FFN] float32
	mean, rstd, loss       cuda.DevicePtr // [rows] float32
	w, bias, wte, wpe      cuda.DevicePtr // bfloat16 parameters
	dw, db, dwte, dwpe     cuda.DevicePtr // float32 gradients
	tok, tgt, order, start cuda.DevicePtr // int32
}

func newGPTBench(b *testing.B) *gptBench {
	d := cudatest.Require(b)
	k, err := Load(d)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { k.Close() })
	g := &gptBench{s: cudatest.Stream(b, d), k: k}
	f32 := func(n int) cuda.DevicePtr {
		p := cudatest.Alloc(b, d, 4*n)
		v := make([]float32, n)
		x := uint32(n)
		for i := range v {
			x = x*1664525 + 1013904223
			v[i] = float32(int32(x>>8)-1<<23) / (1 << 22) // in [-2, 2)
		}
		must(b, g.s.Upload(p, cuda.Bytes(v)))
		return p
	}
	bf := func(n int) cuda.DevicePtr {
		p := cudatest.Alloc(b, d, 2*n)
		v := make([]uint16, n)
		for i := range v {
			v[i] = 0x3f80 + uint16(i%64) // 1 to about 1.5
		}
		must(b, g.s.Upload(p, cuda.Bytes(v)))
		return p
	}
	g.a, g.c, g.e = f32(gbRows*gbF), f32(gbRows*gbF), f32(gbRows*gbF)
	g.mean, g.rstd, g.loss = f32(gbRows), f32(gbRows), f32(gbRows)
	g.w, g.bias, g.wte, g.wpe = bf(gbF), bf(gbF), bf(gbVocab*gbH), bf(gbSeq*gbH)
	g.dw, g.db, g.dwte, g.dwpe = f32(gbF), f32(gbF), f32(gbVocab*gbH), f32(gbSeq*gbH)
	// Tokens skewed as bytes of source code: one token on 40% of the rows.
	tokens := make([]int32, gbRows)
	for i := range tokens {
		tokens[i] = int32(i*7919) % gbVocab
		if i%5 < 2 {
			tokens[i] = 32
		}
	}
	order, start := TokenRows(tokens, gbVocab)
	i32 := func(v []int32) cuda.DevicePtr {
		p := cudatest.Alloc(b, d, 4*len(v))
		must(b, g.s.Upload(p, cuda.Bytes(v)))
		return p
	}
	g.tok, g.tgt, g.order, g.start = i32(tokens), i32(tokens), i32(order), i32(start)
	// Means and reciprocal deviations of a LayerNorm that make sense.
	must(b, g.k.GPTLayerNorm(g.s, g.e, g.mean, g.rstd, g.a, g.w, g.bias, gbRows, gbH, 1e-5))
	must(b, g.s.Synchronize())
	return g
}

// gptOp is one kernel of BenchmarkGPT: bytes of memory it moves at least
// (read plus written), or flops for the head's products.
type gptOp struct {
	name   string
	bytes  int
	flops  int
	launch func(g *gptBench) error
}

func gptOps() []gptOp {
	const act, ffn = 4 * gbRows * gbH, 4 * gbRows * gbF
	const head = 2 * gbRows * gbH * gbVocab
	colSum := func(n int) func(g *gptBench) error {
		return func(g *gptBench) error { return g.k.GPTColumnSum(g.s, g.db, g.a, gbRows, n) }
	}
	biasAdd := func(n int) func(g *gptBench) error {
		return func(g *gptBench) error { return g.k.GPTBiasAdd(g.s, g.c, g.bias, gbRows, n) }
	}
	return []gptOp{
		{"embed", act, 0, func(g *gptBench) error {
			return g.k.GPTEmbed(g.s, g.c, g.wte, g.wpe, g.tok, gbRows, gbSeq, gbH)
		}},
		{"embed_grad_tokens", act, 0, func(g *gptBench) error {
			return g.k.GPTEmbedGradTokens(g.s, g.dwte, g.a, g.order, g.start, gbVocab, gbH)
		}},
		{"embed_grad_positions", act, 0, func(g *gptBench) error {
			return g.k.GPTEmbedGradPositions(g.s, g.dwpe, g.a, gbBatch, gbSeq, gbH)
		}},
		{"layernorm", 2 * act, 0, func(g *gptBench) error {
			return g.k.GPTLayerNorm(g.s, g.c, g.mean, g.rstd, g.a, g.w, g.bias, gbRows, gbH, 1e-5)
		}},
		{"layernorm_grad_x", 4 * act, 0, func(g *gptBench) error {
			return g.k.GPTLayerNormGradX(g.s, g.c, g.e, g.a, g.mean, g.rstd, g.w, gbRows, gbH)
		}},
		{"layernorm_grad_wb", 2 * act, 0, func(g *gptBench) error {
			return g.k.GPTLayerNormGradWB(g.s, g.dw, g.db, g.e, g.a, g.mean, g.rstd, gbRows, gbH)
		}},
		{"bias_add_768", 2 * act, 0, biasAdd(gbH)},
		{"bias_add_2304", 6 * act, 0, biasAdd(3 * gbH)},
		{"bias_add_3072", 2 * ffn, 0, biasAdd(gbF)},
		{"column_sum_768", act, 0, colSum(gbH)},
		{"column_sum_2304", 3 * act, 0, colSum(3 * gbH)},
		{"column_sum_3072", ffn, 0, colSum(gbF)},
		{"add", 3 * act, 0, func(g *gptBench) error { return g.k.GPTAdd(g.s, g.c, g.c, g.a, gbRows*gbH) }},
		{"gelu", 2 * ffn, 0, func(g *gptBench) error { return g.k.GPTGELU(g.s, g.c, g.a, gbRows*gbF) }},
		{"gelu_grad", 3 * ffn, 0, func(g *gptBench) error { return g.k.GPTGELUGrad(g.s, g.c, g.e, g.a, gbRows*gbF) }},
		{"cross_entropy", 2 * 4 * gbRows * gbVocab, 0, func(g *gptBench) error {
			return g.k.GPTCrossEntropy(g.s, g.loss, g.c, g.a, g.tgt, gbRows, gbVocab, 1.0/gbRows)
		}},
		{"linear_bf16", 0, head, func(g *gptBench) error {
			return g.k.GPTLinearBF16(g.s, g.c, g.a, g.wte, gbRows, gbH, gbVocab)
		}},
		{"linear_bf16_grad_x", 0, head, func(g *gptBench) error {
			return g.k.GPTLinearBF16Grad(g.s, g.c, 0, g.e, g.a, g.wte, gbRows, gbH, gbVocab)
		}},
		{"linear_bf16_grad_w", 0, head, func(g *gptBench) error {
			return g.k.GPTLinearBF16Grad(g.s, 0, g.dwte, g.e, g.a, g.wte, gbRows, gbH, gbVocab)
		}},
	}
}

// gptStepCounts is how many times a training step of the 124M model (one
// micro-batch, forward and backward) queues each kernel of gptOps.
var gptStepCounts = map[string]int{
	"embed": 1, "embed_grad_tokens": 1, "embed_grad_positions": 1,
	"layernorm": 2*gbLayers + 1, "layernorm_grad_x": 2*gbLayers + 1, "layernorm_grad_wb": 2*gbLayers + 1,
	"bias_add_768": 2 * gbLayers, "bias_add_2304": gbLayers, "bias_add_3072": gbLayers,
	"column_sum_768": 2 * gbLayers, "column_sum_2304": gbLayers, "column_sum_3072": gbLayers,
	"add": 2 * gbLayers, "gelu": gbLayers, "gelu_grad": gbLayers, "cross_entropy": 1,
	"linear_bf16": 1, "linear_bf16_grad_x": 1, "linear_bf16_grad_w": 1,
}

// BenchmarkGPT times each non-attention kernel of examples/gpt at the 124M
// shape by CUDA events around b.N launches queued from the device's worker
// (gpu-us/op: the GPU's time, without the host's launch cost), with GB/s of the
// bytes it must move and their percentage of a device-to-device copy of
// 8192 x 3072 floats (the copy sub-benchmark), or TFLOP/s for the head;
// then "step", every kernel as many times as one training step queues it
// (gptStepCounts), reported in gpu-ms/op. Run it with a fixed -benchtime
// (say 20x): the one-thread-per-column kernels of older commits take
// 120 ms per step. The file builds against those commits too (it calls
// the launchers only), for old-against-new figures.
func BenchmarkGPT(b *testing.B) {
	g := newGPTBench(b)
	copyGBs := 0.0
	b.Run("copy", func(b *testing.B) {
		const n = 4 * gbRows * gbF
		copyGBs = gptTime(b, g, 2*n, 0, func() error { return g.s.CopyDtoD(g.c, g.a, n) })
	})
	ops := gptOps()
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			gbs := gptTime(b, g, op.bytes, op.flops, func() error { return op.launch(g) })
			if op.bytes > 0 && copyGBs > 0 {
				b.ReportMetric(100*gbs/copyGBs, "%copy")
			}
		})
	}
	b.Run("step", func(b *testing.B) {
		gptTime(b, g, 0, 0, func() error {
			for _, op := range ops {
				for range gptStepCounts[op.name] {
					if err := op.launch(g); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
}

// gptTime times b.N calls of queue on g's stream by CUDA events, queued
// from the device's worker goroutine (cuda.Device.Do), and
// reports gpu-us/op (gpu-ms/op when neither bytes nor flops are given),
// GB/s of bytes or TFLOP/s of flops; it returns the GB/s.
func gptTime(b *testing.B, g *gptBench, bytes, flops int, queue func() error) float64 {
	per := cudatest.GPUTime(b, g.k.Device(), g.s, queue)
	switch {
	case bytes > 0:
		b.ReportMetric(float64(per.Nanoseconds())/1e3, "gpu-us/op")
		gbs := float64(bytes) / per.Seconds() / 1e9
		b.ReportMetric(gbs, "GB/s")
		return gbs
	case flops > 0:
		b.ReportMetric(float64(per.Nanoseconds())/1e3, "gpu-us/op")
		b.ReportMetric(float64(flops)/per.Seconds()/1e12, "TFLOP/s")
	default:
		b.ReportMetric(float64(per.Nanoseconds())/1e6, "gpu-ms/op")
	}
	return 0
}
