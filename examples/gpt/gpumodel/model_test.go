package gpumodel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// testShape has sizes of whole 128-blocks for the hidden and FFN widths
// (and a partial one nowhere), so every recipe's kernels take it, and
// heads of 64, which both attentions take.
var testShape = model.Config{Layers: 2, Hidden: 128, Heads: 2, FFN: 256, Vocab: 256, Seq: 32}

// attentions are the model's attention implementations; the GPU tests
// run each.
var attentions = []Attention{AttentionFlash, AttentionGEMM}

// recipes are the optimizer's weight recipes the model runs with.
var recipes = []struct {
	name string
	r    fp8.Recipe
}{
	{"current", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}},
	{"delayed", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed}},
	{"128x128", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}},
	{"1x128", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}},
	{"mxfp8", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.MXFP8}},
}

// rig is an optimizer on GPU 0 over a model's parameters, with an engine
// and kernels on the same device and stream.
type rig struct {
	o  *optimizer.Optimizer
	e  *gemm.Engine
	k  *kernels.Set
	be *gpu.Backend
}

// newRig returns a rig for cfg with weights of recipe r; it skips
// without a GPU.
func newRig(t testing.TB, cfg model.Config, lr float64, r fp8.Recipe) *rig {
	t.Helper()
	return newRigInit(t, cfg, lr, r, cfg.Init())
}

// newRigInit is newRig with the initial weights of init.
func newRigInit(t testing.TB, cfg model.Config, lr float64, r fp8.Recipe, init optimizer.InitFunc) *rig {
	t.Helper()
	be, err := gpu.New(0)
	cudatest.Unavailable(t, err, gpu.ErrUnavailable)
	t.Cleanup(func() { be.Close() })
	ocfg := optimizer.Config{GradType: buffer.Float32, LR: optimizer.Constant(lr), Beta2: 0.95, Recipe: r}
	o, err := optimizer.New(context.Background(), single.New(buffer.Device, nil), be, cfg.Params(), init, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	e, err := gemm.New(be.Device(), be.Stream())
	cudatest.Unavailable(t, err, gemm.ErrUnavailable)
	t.Cleanup(func() { e.Close() })
	k, err := kernels.Load(be.Device())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return &rig{o: o, e: e, k: k, be: be}
}

// model returns a model on the rig's device, closed when the test ends.
func (r *rig) model(t testing.TB, cfg model.Config, batch, seq int, opts Options) *Model {
	t.Helper()
	m, err := NewWith(r.e, r.k, cfg, batch, seq, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// trainPass zeroes the gradients and runs one forward (dloss 1) and
// backward pass of m on tokens and targets.
func trainPass(t testing.TB, r *rig, m *Model, tokens, targets []int32) {
	t.Helper()
	if err := m.ZeroGrads(r.o.Grad); err != nil {
		t.Fatal(err)
	}
	if err := m.Forward(r.o.Param, tokens, targets, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(r.o.Param, r.o.Grad, nil); err != nil {
		t.Fatal(err)
	}
}

func randomTokens(n, vocab int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 3))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(vocab))
	}
	return out
}

// grads downloads every parameter's float32 gradient bytes.
func (r *rig) grads(t testing.TB, cfg model.Config) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, p := range cfg.Params() {
		gv, err := r.o.Grad(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, gv.Data.Len())
		if err := r.be.Read(raw, gv.Data, 0); err != nil {
			t.Fatal(err)
		}
		out[p.Name] = raw
	}
	return out
}

// TestGPUModelMatchesCPU runs one forward and backward pass on the GPU and
// in the float64 model with the weights the optimizer gathered (the FP8
// ones dequantized: the very values the GEMMs read), for every weight
// recipe. The GPU quantizes the linear inputs to E4M3 (3 mantissa bits:
// relative rounding error up to 2^-4, about 3.6% RMS per element) and the
// output gradients to E5M2 (2 bits: about 7.2% RMS), per tensor or per
// 1x128 block, so agreement is statistical: the loss, whose errors average
// over every token, within 2%; every parameter's gradient within 25% in
// relative L2 norm (the per-element errors average over each product's
// shared dimension but compound through the blocks; typically a few
// percent, while a wrong scale, transpose or block index gives errors of
// order 1). The logits (Logits) must give the loss the GPU computed.
// Both attentions (flash and GEMM) are checked, and with flash the
// bfloat16 head (HeadBF16) for every recipe. The reference rounds qkv and
// fc to bfloat16 where the GPU model keeps them so (model.CPU.BF16), and
// the head where HeadBF16 does (model.CPU.HeadBF16).
func TestGPUModelMatchesCPU(t *testing.T) {
	for _, at := range attentions {
		for _, rc := range recipes {
			t.Run(at.String()+"/"+rc.name, func(t *testing.T) { modelMatchesCPU(t, rc.r, Options{Attention: at}) })
		}
	}
	for _, rc := range recipes {
		t.Run("head-bf16/"+rc.name, func(t *testing.T) { modelMatchesCPU(t, rc.r, Options{Head: HeadBF16}) })
	}
}

// modelMatchesCPU is TestGPUModelMatchesCPU for weights of recipe rc and
// options o, with 32 positions, or 128 with AttentionCuDNN (cuDNN before
// 9.16 needs sequences that are multiples of 128).
func modelMatchesCPU(t *testing.T, rc fp8.Recipe, o Options) {
	cfg, batch, seq := testShape, 2, 32
	if o.Attention == AttentionCuDNN {
		cfg.Seq, seq = 128, 128
	}
	r := newRig(t, cfg, 1e-3, rc)
	m := r.model(t, cfg, batch, seq, o)
	tokens, targets := randomTokens(batch*seq, cfg.Vocab, 1), randomTokens(batch*seq, cfg.Vocab, 2)
	trainPass(t, r, m, tokens, targets)
	loss, err := m.Loss()
	if err != nil {
		t.Fatal(err)
	}
	checkLogits(t, m, targets, loss)
	ref := &model.CPU{Config: cfg, W: map[string][]float64{}, BF16: true, HeadBF16: o.Head == HeadBF16}
	for _, p := range cfg.Params() {
		w, err := r.o.Weights(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range w {
			ref.W[p.Name] = append(ref.W[p.Name], float64(x))
		}
	}
	a, err := ref.Forward(tokens, targets, batch, seq)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loss %.6f on the GPU, %.6f in the reference", loss, a.Loss)
	if math.Abs(loss-a.Loss) > 0.02*a.Loss {
		t.Errorf("loss %v on the GPU, %v in the reference", loss, a.Loss)
	}
	want := ref.Backward(a)
	got := r.grads(t, cfg)
	for _, p := range cfg.Params() {
		var num, den float64
		g := cuda.View[float32](got[p.Name])
		for i, w := range want[p.Name] {
			d := float64(g[i]) - w
			num += d * d
			den += w * w
		}
		rel := math.Sqrt(num / den)
		t.Logf("%-22s relative L2 error %.4f", p.Name, rel)
		if !(rel < 0.25) {
			t.Errorf("%s: gradient relative L2 error %.3f", p.Name, rel)
		}
	}
}

// checkLogits downloads the logits and checks that their cross-entropy
// against targets, computed here in float64, is the GPU's loss (to
// float32 rounding): the logits are intact after Forward, not overwritten
// by their gradient.
func checkLogits(t *testing.T, m *Model, targets []int32, loss float64) {
	t.Helper()
	v := m.cfg.Vocab
	logits := make([]float32, m.rows*v)
	if err := m.Logits(logits); err != nil {
		t.Fatal(err)
	}
	if err := m.Logits(logits[1:]); err == nil {
		t.Error("Logits into a short slice: no error")
	}
	sum := 0.0
	for r := range m.rows {
		row := logits[r*v : (r+1)*v]
		mx := math.Inf(-1)
		for _, x := range row {
			mx = max(mx, float64(x))
		}
		s := 0.0
		for _, x := range row {
			s += math.Exp(float64(x) - mx)
		}
		sum += mx + math.Log(s) - float64(row[targets[r]])
	}
	if ce := sum / float64(m.rows); math.Abs(ce-loss) > 1e-5*math.Abs(loss) {
		t.Errorf("cross-entropy of the downloaded logits %v, the GPU's loss %v", ce, loss)
	}
}

// run is what two accumulated micro-batches produced.
type run struct {
	losses, logits []byte
	grads          map[string][]byte
	kept           map[string][]byte // the linear layers' kept FP8 inputs (keptInputs)
}

// twoMicroBatches zeroes the gradients and runs two micro-batches of
// different tokens (dloss 1/2 each), returning the second's losses and
// logits and the accumulated gradients.
func twoMicroBatches(t testing.TB, r *rig, m *Model) run {
	t.Helper()
	n := m.rows
	if err := m.ZeroGrads(r.o.Grad); err != nil {
		t.Fatal(err)
	}
	for mb := range uint64(2) {
		tokens, targets := randomTokens(n, m.cfg.Vocab, 10+mb), randomTokens(n, m.cfg.Vocab, 20+mb)
		if err := m.Forward(r.o.Param, tokens, targets, 0.5); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(r.o.Param, r.o.Grad, nil); err != nil {
			t.Fatal(err)
		}
	}
	out := run{losses: make([]byte, 4*n), logits: make([]byte, 4*n*m.cfg.Vocab), grads: r.grads(t, m.cfg), kept: keptInputs(t, m)}
	if err := m.s.Download(out.losses, m.losses); err != nil {
		t.Fatal(err)
	}
	if err := m.s.Download(out.logits, m.logits); err != nil {
		t.Fatal(err)
	}
	return out
}

// keptInputs downloads the FP8 input each linear layer of m keeps
// (gemm.Linear.Kept), its codes then its scale_inv bytes, by the layer's
// name; none under Recompute.
func keptInputs(t testing.TB, m *Model) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for l := range m.layers {
		for i, lin := range m.layers[l].lin {
			x, _ := lin.Kept()
			if x.Data == 0 {
				continue
			}
			n := x.Rows * x.Cols
			b := make([]byte, n+gemm.ScaleBytes(x.Rows, x.Cols, x.Scales))
			if err := m.s.Download(b[:n], x.Data); err != nil {
				t.Fatal(err)
			}
			if err := m.s.Download(b[n:], x.ScaleInv); err != nil {
				t.Fatal(err)
			}
			out[lname(l, linearNames[i])] = b
		}
	}
	return out
}

// TestGPUOptionsBitIdentical runs two accumulated micro-batches with the
// default options (the fused forward and backward), Unfused, Recompute,
// KeepTransposed and combinations, on the same gathered weights: every
// loss, logit and gradient byte must be the same (recomputation reruns
// deterministic kernels and quantizes the same bits again; a kept
// transpose is the transient one made earlier; the fused producers
// compute the unfused kernels' values and quantize them as the linear
// layers do; in backward the LayerNorm and GELU gradients fold the exact
// amax of the output gradients that Unfused's gemm passes compute, so
// every parameter's gradient compares the two backward passes), and so must
// every FP8 linear input that both runs keep. It also checks that Backward
// is refused after an evaluation Forward (dloss 0). It runs with both
// attentions and every weight recipe (per-tensor activations, and 1x128
// blocks with 128x128 weights).
func TestGPUOptionsBitIdentical(t *testing.T) {
	for _, at := range attentions {
		for _, rc := range recipes {
			t.Run(at.String()+"/"+rc.name, func(t *testing.T) { optionsBitIdentical(t, rc.r, at) })
		}
	}
}

// optionsBitIdentical is TestGPUOptionsBitIdentical for weights of recipe
// rc and attention at.
func optionsBitIdentical(t *testing.T, rc fp8.Recipe, at Attention) {
	const batch, seq = 2, 32
	r := newRig(t, testShape, 1e-3, rc)
	base := twoMicroBatches(t, r, r.model(t, testShape, batch, seq, Options{Attention: at}))
	if len(base.kept) != nLinear*testShape.Layers {
		t.Fatalf("the default run keeps %d FP8 inputs, want %d", len(base.kept), nLinear*testShape.Layers)
	}
	for _, o := range []Options{{Unfused: true}, {Unfused: true, KeepTransposed: true}, {Recompute: true}, {KeepTransposed: true},
		{Recompute: true, KeepTransposed: true}, {Unfused: true, Recompute: true}, {FuseDY: true}, {FuseDY: true, Recompute: true},
		{KeepTransposedLayers: []string{"mlp.proj"}}, {FuseDY: true, KeepTransposedLayers: []string{"attn.qkv", "mlp.proj"}}} {
		if o.FuseDY && rc.Scaling == fp8.Block128x128 {
			continue // per-tensor output gradients only
		}
		o.Attention = at
		m := r.model(t, testShape, batch, seq, o)
		got := twoMicroBatches(t, r, m)
		name := fmt.Sprintf("unfused=%v recompute=%v keep-transposed=%v%q fuse-dy=%v", o.Unfused, o.Recompute, o.KeepTransposed, o.KeepTransposedLayers, o.FuseDY)
		if !bytes.Equal(got.losses, base.losses) || !bytes.Equal(got.logits, base.logits) {
			t.Errorf("%s: losses or logits differ from the default run's", name)
		}
		for _, p := range testShape.Params() {
			if !bytes.Equal(got.grads[p.Name], base.grads[p.Name]) {
				t.Errorf("%s: gradient of %s differs from the default run's", name, p.Name)
			}
		}
		if !o.Recompute && len(got.kept) != len(base.kept) {
			t.Errorf("%s: %d FP8 inputs kept, the default run keeps %d", name, len(got.kept), len(base.kept))
		}
		for lin, b := range got.kept {
			if !bytes.Equal(b, base.kept[lin]) {
				t.Errorf("%s: the FP8 input %s keeps differs from the default run's", name, lin)
			}
		}
		tokens := randomTokens(m.rows, m.cfg.Vocab, 1)
		if err := m.Forward(r.o.Param, tokens, tokens, 0); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(r.o.Param, r.o.Grad, nil); err == nil {
			t.Errorf("%s: Backward after a Forward with dloss 0: no error", name)
		}
	}
}

// TestGPUDeterminism: two fresh rigs (optimizer, engine, model) given the
// same inputs give the same bits (losses, logits, gradients of two
// micro-batches) per recipe. It also logs their SHA-256, which scripts
// compare between two processes. Both attentions.
func TestGPUDeterminism(t *testing.T) {
	for _, at := range attentions {
		for _, rc := range recipes[:3] {
			t.Run(at.String()+"/"+rc.name, func(t *testing.T) {
				hash := func() []byte {
					r := newRig(t, testShape, 1e-3, rc.r)
					got := twoMicroBatches(t, r, r.model(t, testShape, 2, 32, Options{Attention: at}))
					h := sha256.New()
					h.Write(got.losses)
					h.Write(got.logits)
					for _, p := range testShape.Params() {
						h.Write(got.grads[p.Name])
					}
					return h.Sum(nil)
				}
				a, b := hash(), hash()
				if !bytes.Equal(a, b) {
					t.Errorf("two runs on the same inputs differ: %x and %x", a, b)
				}
				t.Logf("determinism %s/%s %x", at, rc.name, a)
			})
		}
	}
}

// TestGPUMemory checks Memory after a step, fused (the default, and with
// Epilogue) and Unfused: the prediction from the shapes equals, category by category, what the model and its linear
// layers allocated and what the engine's activation buffer holds; the
// device allocator's own count of the model's allocations equals their
// sum; a second step allocates nothing; the FP8 linear inputs stay at or
// below 0.52x of bfloat16 without KeepTransposed. Both attentions.
func TestGPUMemory(t *testing.T) {
	for _, at := range attentions {
		for _, rc := range recipes[:3] {
			for _, o := range []Options{{Attention: at}, {Unfused: true, Attention: at}, {Recompute: true, Attention: at}, {KeepTransposed: true, Attention: at}, {Head: HeadBF16, Attention: at},
				{Epilogue: true, Attention: at}, {ActGradBF16: true, Attention: at}, {FuseDY: true, ActGradBF16: true, Attention: at}} {
				if o.FuseDY && rc.r.Scaling == fp8.Block128x128 {
					continue // per-tensor output gradients only
				}
				t.Run(fmt.Sprintf("%s/%s/unfused=%v/recompute=%v/keep=%v/head=%v/epilogue=%v/act-grad-bf16=%v/fuse-dy=%v", at, rc.name, o.Unfused, o.Recompute, o.KeepTransposed, o.Head, o.Epilogue, o.ActGradBF16, o.FuseDY), func(t *testing.T) {
					r := newRig(t, testShape, 1e-3, rc.r)
					memoryMatches(t, r, r.model(t, testShape, 2, 32, o))
				})
			}
		}
	}
}

// memoryMatches is TestGPUMemory's check of model m on rig r.
func memoryMatches(t *testing.T, r *rig, m *Model) {
	t.Helper()
	twoMicroBatches(t, r, m)
	rep, err := m.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Predicted != rep.Allocated {
		t.Errorf("predicted %+v\nallocated %+v", rep.Predicted, rep.Allocated)
	}
	a := rep.Allocated
	if want := a.Layers*a.PerLayer() + a.Final + a.Scratch; rep.Device != want {
		t.Errorf("the device allocator counted %d bytes, the categories sum to %d", rep.Device, want)
	}
	before := r.be.Device().Usage().DeviceBytes
	twoMicroBatches(t, r, m)
	if after := r.be.Device().Usage().DeviceBytes; after != before {
		t.Errorf("a second step allocated %d bytes", after-before)
	}
	if !m.opts.KeepTransposed && a.LinearRatio() > 0.52 {
		t.Errorf("FP8 linear inputs at %.4fx of bfloat16", a.LinearRatio())
	}
	t.Logf("%v", a)
}

// TestGPUTraining takes 30 AdamW steps on one repeated batch through the
// overlapped pipeline (GradReady during the backward pass, StepAsync,
// WaitGathers), with 128x128 weight tiles and Recompute, with each
// attention: the loss must fall below half its start.
func TestGPUTraining(t *testing.T) {
	for _, at := range attentions {
		t.Run(at.String(), func(t *testing.T) { training(t, at) })
	}
}

// training is TestGPUTraining with attention at.
func training(t *testing.T, at Attention) {
	const batch, seq = 2, 32
	r := newRig(t, testShape, 3e-3, recipes[2].r)
	m := r.model(t, testShape, batch, seq, Options{Recompute: true, Attention: at})
	ctx := context.Background()
	tokens := randomTokens(batch*seq, 16, 5) // a small alphabet: learnable
	targets := append(tokens[1:], tokens[0])
	var first, last float64
	for step := range 30 {
		if err := r.o.WaitGathers(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.ZeroGrads(r.o.Grad); err != nil {
			t.Fatal(err)
		}
		if err := m.Forward(r.o.Param, tokens, targets, 1); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(r.o.Param, r.o.Grad, r.o.GradReady); err != nil {
			t.Fatal(err)
		}
		if _, err := r.o.StepAsync(ctx); err != nil {
			t.Fatal(err)
		}
		loss, err := m.Loss()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d: loss %.4f", step+1, loss)
		if step == 0 {
			first = loss
		}
		last = loss
	}
	if !(last < first/2) {
		t.Fatalf("loss %v after 30 steps, %v at the first", last, first)
	}
}
