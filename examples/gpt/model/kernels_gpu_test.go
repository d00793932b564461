package model_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/kernels"
)

// The GPU tests below run each kernel of internal/kernels/gpt.cu on random
// inputs and compare it with the float64 reference of this package. Inputs
// are exactly representable on both sides (float32 activations, bfloat16
// parameters), so the differences are the kernels' float32 rounding only:
// every element must satisfy |gpu - ref| <= 1e-5·scale + 1e-4·|ref|, scale
// being the largest |ref| of the tensor; the relative tolerance is 1e-4 or
// 2e-4 for sums of many terms, 1e-5 to 1e-6 for elementwise results.
// Without a GPU they skip (cudatest).

type gpuEnv struct {
	t *testing.T
	d *cuda.Device
	s *cuda.Stream
	k *kernels.Set
	r *rand.Rand
}

func newGPU(t *testing.T) *gpuEnv {
	d := cudatest.Require(t)
	k, err := kernels.Load(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return &gpuEnv{t: t, d: d, s: cudatest.Stream(t, d), k: k, r: rand.New(rand.NewPCG(5, 6))}
}

// f32 returns n random float32 values of standard deviation std, on the
// device and as float64.
func (g *gpuEnv) f32(n int, std float64) (cuda.DevicePtr, []float64) {
	v := make([]float32, n)
	ref := make([]float64, n)
	for i := range v {
		v[i] = float32(std * g.r.NormFloat64())
		ref[i] = float64(v[i])
	}
	p := cudatest.Alloc(g.t, g.d, 4*max(n, 1))
	g.must(g.s.Upload(p, cuda.Bytes(v)))
	return p, ref
}

// bf returns n random bfloat16 values around mean, on the device and as float64.
func (g *gpuEnv) bf(n int, mean, std float64) (cuda.DevicePtr, []float64) {
	v := make([]uint16, n)
	ref := make([]float64, n)
	for i := range v {
		v[i] = bf16.FromFloat32(float32(mean + std*g.r.NormFloat64()))
		ref[i] = float64(bf16.ToFloat32(v[i]))
	}
	p := cudatest.Alloc(g.t, g.d, 2*max(n, 1))
	g.must(g.s.Upload(p, cuda.Bytes(v)))
	return p, ref
}

func (g *gpuEnv) i32(v []int32) cuda.DevicePtr {
	p := cudatest.Alloc(g.t, g.d, 4*max(len(v), 1))
	g.must(g.s.Upload(p, cuda.Bytes(v)))
	return p
}

func (g *gpuEnv) must(err error) {
	g.t.Helper()
	if err != nil {
		g.t.Fatal(err)
	}
}

// check downloads n float32 values at p and compares them with want.
func (g *gpuEnv) check(name string, p cuda.DevicePtr, want []float64, rtol float64) {
	g.t.Helper()
	got := make([]float32, len(want))
	g.must(g.s.Download(cuda.Bytes(got), p))
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for i, w := range want {
		if d := math.Abs(float64(got[i]) - w); !(d <= 1e-5*scale+rtol*math.Abs(w)) {
			g.t.Fatalf("%s[%d] = %v, reference %v (difference %.3g, tensor scale %.3g)", name, i, got[i], w, d, scale)
		}
	}
}

func TestGPUEmbedding(t *testing.T) {
	g := newGPU(t)
	const batch, seq, h, vocab = 3, 40, 48, 50
	rows := batch * seq
	tokens := make([]int32, rows)
	for i := range tokens {
		tokens[i] = int32(g.r.IntN(vocab - 1)) // the last token never occurs
	}
	wte, wteRef := g.bf(vocab*h, 0, 0.5)
	wpe, wpeRef := g.bf(seq*h, 0, 0.5)
	tok := g.i32(tokens)
	x := cudatest.Alloc(t, g.d, 4*rows*h)
	g.must(g.k.GPTEmbed(g.s, x, wte, wpe, tok, rows, seq, h))
	want := make([]float64, rows*h)
	model.Embed(want, wteRef, wpeRef, tokens, batch, seq, h)
	g.check("x", x, want, 1e-6)

	dx, dxRef := g.f32(rows*h, 1)
	dwte, dwteRef := g.f32(vocab*h, 1)
	dwpe, dwpeRef := g.f32(seq*h, 1)
	order, start := kernels.TokenRows(tokens, vocab)
	g.must(g.k.GPTEmbedGradTokens(g.s, dwte, dx, g.i32(order), g.i32(start), vocab, h))
	g.must(g.k.GPTEmbedGradPositions(g.s, dwpe, dx, batch, seq, h))
	model.EmbedBackward(dwteRef, dwpeRef, dxRef, tokens, batch, seq, h)
	g.check("dwte", dwte, dwteRef, 2e-4)
	g.check("dwpe", dwpe, dwpeRef, 2e-4)
}

func TestGPULayerNorm(t *testing.T) {
	g := newGPU(t)
	for _, n := range []int{48, 100, 768} {
		const rows = 67
		x, xRef := g.f32(rows*n, 2)
		w, wRef := g.bf(n, 1, 0.3)
		b, bRef := g.bf(n, 0, 0.3)
		y, mean, rstd := cudatest.Alloc(t, g.d, 4*rows*n), cudatest.Alloc(t, g.d, 4*rows), cudatest.Alloc(t, g.d, 4*rows)
		g.must(g.k.GPTLayerNorm(g.s, y, mean, rstd, x, w, b, rows, n, model.LNEps))
		yRef, meanRef, rstdRef := make([]float64, rows*n), make([]float64, rows), make([]float64, rows)
		model.LayerNorm(yRef, meanRef, rstdRef, xRef, wRef, bRef, rows, n)
		g.check("y", y, yRef, 1e-4)
		g.check("rstd", rstd, rstdRef, 1e-4)

		dy, dyRef := g.f32(rows*n, 1)
		dx, dxRef := g.f32(rows*n, 1)
		dw, dwRef := g.f32(n, 1)
		db, dbRef := g.f32(n, 1)
		g.must(g.k.GPTLayerNormGradX(g.s, dx, dy, x, mean, rstd, w, rows, n))
		g.must(g.k.GPTLayerNormGradWB(g.s, dw, db, dy, x, mean, rstd, rows, n))
		model.LayerNormBackward(dxRef, dwRef, dbRef, dyRef, xRef, meanRef, rstdRef, wRef, rows, n)
		g.check("dx", dx, dxRef, 2e-4)
		g.check("dw", dw, dwRef, 2e-4)
		g.check("db", db, dbRef, 2e-4)
	}
}

func TestGPUElementwise(t *testing.T) {
	g := newGPU(t)
	const rows, n = 33, 70
	x, xRef := g.f32(rows*n, 3)
	y := cudatest.Alloc(t, g.d, 4*rows*n)
	g.must(g.k.GPTGELU(g.s, y, x, rows*n))
	want := make([]float64, rows*n)
	model.GELU(want, xRef)
	g.check("gelu", y, want, 1e-5)
	dy, dyRef := g.f32(rows*n, 1)
	g.must(g.k.GPTGELUGrad(g.s, y, dy, x, rows*n))
	model.GELUBackward(want, dyRef, xRef)
	g.check("gelu grad", y, want, 1e-5)

	b, bRef := g.bf(n, 0, 1)
	g.must(g.k.GPTBiasAdd(g.s, x, b, rows, n))
	for i := range xRef {
		xRef[i] += bRef[i%n]
	}
	g.check("bias add", x, xRef, 1e-6)
	db, dbRef := g.f32(n, 1)
	g.must(g.k.GPTColumnSum(g.s, db, dy, rows, n))
	model.LinearBackward(nil, nil, dbRef, dyRef, nil, nil, rows, 0, n)
	g.check("column sum", db, dbRef, 2e-4)
	g.must(g.k.GPTAdd(g.s, x, x, dy, rows*n))
	for i := range xRef {
		xRef[i] += dyRef[i]
	}
	g.check("add", x, xRef, 1e-6)
}

func TestGPUCausalSoftmax(t *testing.T) {
	g := newGPU(t)
	for _, T := range []int{1, 37, 70} {
		const n, scale = 5, 0.125
		s, sRef := g.f32(n*T*T, 8)
		p := cudatest.Alloc(t, g.d, 4*n*T*T)
		g.must(g.k.GPTCausalSoftmax(g.s, p, s, n, T, scale))
		pRef := make([]float64, n*T*T)
		model.CausalSoftmax(pRef, sRef, n, T, scale)
		g.check("p", p, pRef, 1e-5)
		dp, dpRef := g.f32(n*T*T, 1)
		g.must(g.k.GPTCausalSoftmaxGrad(g.s, dp, p, dp, n, T, scale)) // in place
		dsRef := make([]float64, n*T*T)
		model.CausalSoftmaxBackward(dsRef, pRef, dpRef, n, T, scale)
		g.check("ds", dp, dsRef, 1e-4)
	}
}

func TestGPUCrossEntropy(t *testing.T) {
	g := newGPU(t)
	for _, v := range []int{50, 256} {
		const rows = 45
		logits, lRef := g.f32(rows*v, 3)
		targets := make([]int32, rows)
		for i := range targets {
			targets[i] = int32(g.r.IntN(v))
		}
		loss := cudatest.Alloc(t, g.d, 4*rows)
		coef := float32(1.0 / rows)
		g.must(g.k.GPTCrossEntropy(g.s, loss, logits, logits, g.i32(targets), rows, v, coef)) // gradient in place
		probs := make([]float64, rows*v)
		lossRef := make([]float64, rows)
		for r := range rows {
			lossRef[r] = model.CrossEntropy(probs[r*v:(r+1)*v], lRef[r*v:(r+1)*v], targets[r:r+1], 1, v)
		}
		g.check("loss", loss, lossRef, 1e-5)
		grad := make([]float64, rows*v)
		model.CrossEntropy(probs, lRef, targets, rows, v)
		model.CrossEntropyBackward(grad, probs, targets, rows, v, 1)
		g.check("dlogits", logits, grad, 1e-4)
	}
}

func TestGPUAttention(t *testing.T) {
	g := newGPU(t)
	for _, c := range []struct{ batch, seq, h, heads int }{{2, 7, 16, 2}, {2, 45, 128, 2}, {1, 70, 48, 3}} {
		rows := c.batch * c.seq
		scale := 1 / math.Sqrt(float64(c.h/c.heads))
		qkv, qkvRef := g.f32(rows*3*c.h, 1)
		pn := c.batch * c.heads * c.seq * c.seq
		y, p := cudatest.Alloc(t, g.d, 4*rows*c.h), cudatest.Alloc(t, g.d, 4*pn)
		g.must(g.k.GPTAttention(g.s, y, p, qkv, c.batch, c.seq, c.h, c.heads, float32(scale)))
		yRef, pRef := make([]float64, rows*c.h), make([]float64, pn)
		model.Attention(yRef, pRef, qkvRef, c.batch, c.seq, c.h, c.heads)
		g.check("p", p, pRef, 1e-4)
		g.check("y", y, yRef, 1e-4)

		dy, dyRef := g.f32(rows*c.h, 1)
		dqkv, ds := cudatest.Alloc(t, g.d, 4*rows*3*c.h), cudatest.Alloc(t, g.d, 4*pn)
		g.must(g.k.GPTAttentionGrad(g.s, dqkv, ds, dy, p, qkv, c.batch, c.seq, c.h, c.heads, float32(scale)))
		dqkvRef := make([]float64, rows*3*c.h)
		model.AttentionBackward(dqkvRef, dyRef, pRef, qkvRef, c.batch, c.seq, c.h, c.heads)
		g.check("dqkv", dqkv, dqkvRef, 2e-4)
	}
}

func TestGPULinearBF16(t *testing.T) {
	g := newGPU(t)
	const rows, in, out = 77, 96, 50
	x, xRef := g.f32(rows*in, 1)
	w, wRef := g.bf(out*in, 0, 0.2)
	y := cudatest.Alloc(t, g.d, 4*rows*out)
	g.must(g.k.GPTLinearBF16(g.s, y, x, w, rows, in, out))
	yRef := make([]float64, rows*out)
	model.Linear(yRef, xRef, wRef, nil, rows, in, out)
	g.check("y", y, yRef, 2e-4)
	dy, dyRef := g.f32(rows*out, 1)
	dx, dxRef := g.f32(rows*in, 1)
	dw, dwRef := g.f32(out*in, 1)
	g.must(g.k.GPTLinearBF16Grad(g.s, dx, dw, dy, x, w, rows, in, out))
	model.LinearBackward(dxRef, dwRef, nil, dyRef, xRef, wRef, rows, in, out)
	g.check("dx", dx, dxRef, 2e-4)
	g.check("dw", dw, dwRef, 2e-4)
}
