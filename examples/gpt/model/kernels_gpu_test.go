package model_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/examples/gpt/model"
)

// The GPU tests below run each kernel of examples/gpt/kernels/gpt.cu on random
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

// checkExact downloads n float32 values at p and requires them to be want
// (float32 values) bit for bit.
func (g *gpuEnv) checkExact(name string, p cuda.DevicePtr, want []float64) {
	g.t.Helper()
	got := make([]float32, len(want))
	g.must(g.s.Download(cuda.Bytes(got), p))
	for i, w := range want {
		if math.Float32bits(got[i]) != math.Float32bits(float32(w)) {
			g.t.Fatalf("%s[%d] = %v, want %v unchanged", name, i, got[i], w)
		}
	}
}

// TestGPUEmbedding checks the lookup and both gradients on a small shape
// and on the 124M model's widths with a skewed token distribution (one
// token on about 40% of the rows, as spaces and tabs are in source code),
// rows not a multiple of any block.
func TestGPUEmbedding(t *testing.T) {
	g := newGPU(t)
	for _, c := range []struct{ batch, seq, h, vocab int }{{3, 40, 48, 50}, {3, 67, 768, 256}, {2, 33, 70, 9}} {
		rows := c.batch * c.seq
		t.Logf("%+v", c)
		tokens := make([]int32, rows)
		for i := range tokens {
			tokens[i] = int32(g.r.IntN(c.vocab - 1)) // the last token never occurs
			if g.r.IntN(5) < 2 {
				tokens[i] = 3
			}
		}
		wte, wteRef := g.bf(c.vocab*c.h, 0, 0.5)
		wpe, wpeRef := g.bf(c.seq*c.h, 0, 0.5)
		tok := g.i32(tokens)
		x := cudatest.Alloc(t, g.d, 4*rows*c.h)
		g.must(g.k.GPTEmbed(g.s, x, wte, wpe, tok, rows, c.seq, c.h))
		want := make([]float64, rows*c.h)
		model.Embed(want, wteRef, wpeRef, tokens, c.batch, c.seq, c.h)
		g.check("x", x, want, 1e-6)

		dx, dxRef := g.f32(rows*c.h, 1)
		dwte, dwteRef := g.f32(c.vocab*c.h, 1)
		dwpe, dwpeRef := g.f32(c.seq*c.h, 1)
		order, start := kernels.TokenRows(tokens, c.vocab)
		g.must(g.k.GPTEmbedGradTokens(g.s, dwte, dx, g.i32(order), g.i32(start), c.vocab, c.h))
		g.must(g.k.GPTEmbedGradPositions(g.s, dwpe, dx, c.batch, c.seq, c.h))
		model.EmbedBackward(dwteRef, dwpeRef, dxRef, tokens, c.batch, c.seq, c.h)
		g.check("dwte", dwte, dwteRef, 2e-4)
		g.check("dwpe", dwpe, dwpeRef, 2e-4)
	}
}

// TestGPULayerNorm covers the register-resident kernels (widths that are
// multiples of 4 up to 2048: 48 to 2048) and the any-shape ones (70, not a
// multiple of 4; 2052, above 2048), with rows spanning several chunks of
// the column reductions and not a multiple of them.
func TestGPULayerNorm(t *testing.T) {
	g := newGPU(t)
	for _, c := range []struct{ rows, n int }{{67, 48}, {67, 100}, {67, 70}, {67, 768}, {300, 64}, {600, 768}, {41, 1028}, {300, 2048}, {37, 2052}} {
		rows, n := c.rows, c.n
		t.Logf("%d rows of %d", rows, n)
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

// TestGPUElementwise (with the fused bias and residual connection) covers
// the scalar paths (70 columns) and the float4 ones (768 and 3072
// columns), with rows spanning several chunks of the column sum.
func TestGPUElementwise(t *testing.T) {
	g := newGPU(t)
	for _, c := range []struct{ rows, n int }{{33, 70}, {37, 768}, {700, 768}, {300, 3072}} {
		elementwise(g, c.rows, c.n)
	}
}

func elementwise(g *gpuEnv, rows, n int) {
	t := g.t
	t.Logf("%d rows of %d", rows, n)
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
	biasResidual(g, rows, n, b, bRef)
	db, dbRef := g.f32(n, 1)
	g.must(g.k.GPTColumnSum(g.s, db, dy, rows, n))
	model.LinearBackward(nil, nil, dbRef, dyRef, nil, nil, rows, 0, n)
	g.check("column sum", db, dbRef, 2e-4)
	g.repeats("column sum", db, n, func() error { return g.k.GPTColumnSum(g.s, db, dy, rows, n) })
	g.must(g.k.GPTAdd(g.s, x, x, dy, rows*n))
	for i := range xRef {
		xRef[i] += dyRef[i]
	}
	g.check("add", x, xRef, 1e-6)
	g.must(g.k.GPTAdd(g.s, x, dy, x, rows*n)) // y aliasing b
	for i := range xRef {
		xRef[i] += dyRef[i]
	}
	g.check("add", x, xRef, 1e-6)
}

// biasResidual checks GPTBiasResidual bit for bit against (y + b) + x
// in float32 (IEEE additions, exact on both sides) and against GPTBiasAdd
// then GPTAdd, whose bits the model used to take.
func biasResidual(g *gpuEnv, rows, n int, b cuda.DevicePtr, bRef []float64) {
	y, yRef := g.f32(rows*n, 2)
	x, xRef := g.f32(rows*n, 2)
	y2 := g.upload32(yRef)
	g.must(g.k.GPTBiasResidual(g.s, y, x, b, rows, n))
	g.must(g.k.GPTBiasAdd(g.s, y2, b, rows, n))
	g.must(g.k.GPTAdd(g.s, y2, y2, x, rows*n))
	want := make([]float64, rows*n)
	for i := range want {
		want[i] = float64(float32(float32(yRef[i])+float32(bRef[i%n])) + float32(xRef[i]))
	}
	g.checkExact("bias residual", y, want)
	g.checkExact("bias add then add", y2, want)
}

// TestGPUCrossEntropy covers the register-resident kernels (256, 1000 and
// 2048 logits), the any-shape one (50 and 3000), and the loss alone
// (dlogits 0), which must leave the logits intact.
func TestGPUCrossEntropy(t *testing.T) {
	g := newGPU(t)
	for _, v := range []int{50, 256, 1000, 2048, 3000} {
		const rows = 45
		t.Logf("%d logits", v)
		logits, lRef := g.f32(rows*v, 3)
		targets := make([]int32, rows)
		for i := range targets {
			targets[i] = int32(g.r.IntN(v))
		}
		loss := cudatest.Alloc(t, g.d, 4*rows)
		coef := float32(1.0 / rows)
		tgt := g.i32(targets)
		probs := make([]float64, rows*v)
		lossRef := make([]float64, rows)
		for r := range rows {
			lossRef[r] = model.CrossEntropy(probs[r*v:(r+1)*v], lRef[r*v:(r+1)*v], targets[r:r+1], 1, v)
		}
		g.must(g.k.GPTCrossEntropy(g.s, loss, 0, logits, tgt, rows, v, coef)) // loss only
		g.check("loss", loss, lossRef, 1e-5)
		g.checkExact("logits", logits, lRef)
		g.must(g.s.Memset32(loss, 0, rows))
		g.must(g.k.GPTCrossEntropy(g.s, loss, logits, logits, tgt, rows, v, coef)) // gradient in place
		g.check("loss", loss, lossRef, 1e-5)
		grad := make([]float64, rows*v)
		model.CrossEntropy(probs, lRef, targets, rows, v)
		model.CrossEntropyBackward(grad, probs, targets, rows, v, 1)
		g.check("dlogits", logits, grad, 1e-4)
	}
}

// TestGPULinearBF16 covers the head's tiles (rows and widths not multiples
// of 128, and a width of several whole tiles), the weight gradient in one
// slice (77 rows) and in several, against the float64 model, and checks
// that the weight gradient repeats bit for bit.
func TestGPULinearBF16(t *testing.T) {
	g := newGPU(t)
	for _, c := range []struct{ rows, in, out int }{{77, 96, 50}, {1000, 768, 256}, {300, 2048, 256}, {130, 70, 9}, {2304, 390, 300}} {
		linearBF16(g, c.rows, c.in, c.out)
	}
}

func linearBF16(g *gpuEnv, rows, in, out int) {
	t := g.t
	t.Logf("%d rows, %d in, %d out", rows, in, out)
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

	g.repeats("dw", dw, out*in, func() error { return g.k.GPTLinearBF16Grad(g.s, 0, dw, dy, x, w, rows, in, out) })
}

// repeats zeroes the n float32 at dst and runs queue twice, and requires
// the two results to be the same bit for bit (the kernels sum in a fixed
// order, without atomics).
func (g *gpuEnv) repeats(name string, dst cuda.DevicePtr, n int, queue func() error) {
	g.t.Helper()
	var runs [2][]float32
	for k := range runs {
		g.must(g.s.Memset32(dst, 0, n))
		g.must(queue())
		runs[k] = make([]float32, n)
		g.must(g.s.Download(cuda.Bytes(runs[k]), dst))
	}
	for i := range n {
		if math.Float32bits(runs[0][i]) != math.Float32bits(runs[1][i]) {
			g.t.Fatalf("%s[%d]: %v then %v from the same inputs", name, i, runs[0][i], runs[1][i])
		}
	}
}
