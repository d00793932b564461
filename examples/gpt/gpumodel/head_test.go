package gpumodel

import (
	"math"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/gemm"
)

// TestGPUHeadBF16 runs a training forward and backward pass with
// HeadFP32 and with HeadBF16 on the same gathered weights and checks each
// rounding of HeadBF16 bit for bit against the kernels run here on the
// downloaded tensors, rounded on the host by bf16.Round:
//   - its head input is the rounded input of the HeadFP32 model (the same
//     blocks before it);
//   - its logits are the rounded cuBLASLt product (headSpecs, on this
//     test's bfloat16 copy of that input), which is within float32
//     summation error of GPTLinearBF16's; its losses and logits' gradient
//     are GPTCrossEntropy's of those logits, the gradient rounded;
//   - the final LayerNorm's gradients are GPTLayerNormGradWB's of the
//     rounded input gradient, the embedding gradient of tokens that are no
//     input (the head's part alone) the rounded weight gradient: both
//     cuBLASLt's products of the rounded logits' gradient, each within
//     float32 summation error of GPTLinearBF16Grad's;
//   - the HeadFP32 model's logits are not all bfloat16 (the rounding
//     checks can fail).
func TestGPUHeadBF16(t *testing.T) {
	const batch, seq = 2, 32
	r := newRig(t, testShape, 1e-3, recipes[0].r)
	fp := r.model(t, testShape, batch, seq, Options{})
	bm := r.model(t, testShape, batch, seq, Options{Head: HeadBF16})
	n, h, v := batch*seq, testShape.Hidden, testShape.Vocab
	tokens, targets := randomTokens(n, v/2, 1), randomTokens(n, v, 2) // tokens v/2.. are no input
	s, k := bm.s, bm.k
	dl := func(p cuda.DevicePtr, n int) []float32 {
		out := make([]float32, n)
		if err := s.Download(cuda.Bytes(out), p); err != nil {
			t.Fatal(err)
		}
		return out
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fp.Forward(r.o.Param, tokens, targets, 1))
	lnf32, logits32 := dl(fp.lnf, n*h), dl(fp.logits, n*v)
	if exactBF16(logits32) {
		t.Error("the float32 head's logits are all bfloat16")
	}
	must(bm.ZeroGrads(r.o.Grad))
	must(bm.Forward(r.o.Param, tokens, targets, 1))
	wte, err := hp(r.o.Param, "embed.tokens")
	must(err)
	equalBits(t, "head input", dl(bm.lnf, n*h), roundHost(lnf32))

	// The reference products: cuBLASLt's with the model's specs on this
	// test's bfloat16 copies (the same bits), each within float32
	// summation error of GPTLinearBF16's in-order sums (an independent
	// implementation).
	dev := r.be.Device()
	lt, err := gemm.NewDense(dev)
	must(err)
	t.Cleanup(func() { lt.Close() })
	sl, sx, sw := headSpecs(n, h, v, alignOf(int(wte)))
	plan := func(spec gemm.DenseSpec) *gemm.DensePlan {
		p, err := lt.Plan(spec, 0)
		must(err)
		t.Cleanup(func() { p.Destroy() })
		return p
	}
	codes := func(x []float32) cuda.DevicePtr {
		c := make([]uint16, len(x))
		for i, f := range x {
			c[i] = bf16.FromFloat32(f)
		}
		p := cudatest.Alloc(t, dev, 2*len(c))
		must(s.Upload(p, cuda.Bytes(c)))
		return p
	}
	lnf16 := codes(dl(bm.lnf, n*h))
	y, y32, loss, dy := cudatest.Alloc(t, dev, 4*n*v), cudatest.Alloc(t, dev, 4*n*v), cudatest.Alloc(t, dev, 4*n), cudatest.Alloc(t, dev, 4*n*v)
	must(plan(sl).Run(s, wte, lnf16, y, 0, 0))
	must(k.GPTLinearBF16(s, y32, bm.lnf, wte, n, h, v))
	near(t, "logits", dl(y, n*v), dl(y32, n*v))
	must(s.Upload(y, cuda.Bytes(roundHost(dl(y, n*v)))))
	equalBits(t, "logits", dl(bm.logits, n*v), dl(y, n*v))
	must(k.GPTCrossEntropy(s, loss, dy, y, bm.tgt, n, v, float32(1/float64(n))))
	equalBits(t, "losses", dl(bm.losses, n), dl(loss, n))
	equalBits(t, "logits' gradient", dl(bm.dlogits, n*v), roundHost(dl(dy, n*v)))

	dlog16 := codes(dl(bm.dlogits, n*v))
	dx, dw := cudatest.Alloc(t, dev, 4*n*h), cudatest.Alloc(t, dev, 4*v*h)
	must(plan(sx).Run(s, wte, dlog16, dx, 0, 0))
	must(plan(sw).Run(s, lnf16, dlog16, dw, 0, 0))
	dx32, dw32 := cudatest.Alloc(t, dev, 4*n*h), cudatest.Alloc(t, dev, 4*v*h)
	must(s.Memset32(dx32, 0, n*h))
	must(s.Memset32(dw32, 0, v*h))
	must(k.GPTLinearBF16Grad(s, dx32, dw32, bm.dlogits, bm.lnf, wte, n, h, v))
	near(t, "head input gradient", dl(dx, n*h), dl(dx32, n*h))
	near(t, "head weight gradient", dl(dw, v*h), dl(dw32, v*h))
	must(s.Upload(dx, cuda.Bytes(roundHost(dl(dx, n*h)))))
	gw, gb := cudatest.Alloc(t, dev, 4*h), cudatest.Alloc(t, dev, 4*h)
	must(s.Memset32(gw, 0, h))
	must(s.Memset32(gb, 0, h))
	must(k.GPTLayerNormGradWB(s, gw, gb, dx, bm.xf, bm.meanf, bm.rstdf, n, h))
	wantDW := roundHost(dl(dw, v*h))

	must(bm.Backward(r.o.Param, r.o.Grad, nil))
	g := r.grads(t, testShape)
	equalBits(t, "final LayerNorm weight gradient", cuda.View[float32](g["final_ln.weight"]), dl(gw, h))
	equalBits(t, "final LayerNorm bias gradient", cuda.View[float32](g["final_ln.bias"]), dl(gb, h))
	equalBits(t, "embedding gradient of tokens that are no input", cuda.View[float32](g["embed.tokens"])[v/2*h:], wantDW[v/2*h:])
}

// roundHost returns x rounded to bfloat16 (bf16.Round).
func roundHost(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = bf16.Round(v)
	}
	return out
}

// near requires got within float32 summation error of want: 2^-14 of
// want's largest magnitude.
func near(t *testing.T, name string, got, want []float32) {
	t.Helper()
	var most float64
	for _, w := range want {
		most = max(most, math.Abs(float64(w)))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > most*0x1p-14 || math.IsNaN(d) {
			t.Fatalf("%s[%d] = %v, want %v within %v", name, i, got[i], want[i], most*0x1p-14)
		}
	}
}

// exactBF16 reports whether every element of x is a bfloat16.
func exactBF16(x []float32) bool {
	for _, v := range x {
		if math.Float32bits(bf16.Round(v)) != math.Float32bits(v) {
			return false
		}
	}
	return true
}

// equalBits requires got and want to be the same bits.
func equalBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], want[i])
		}
	}
}
