package gpumodel

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

var testShape = model.Config{Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 256, Seq: 32}

// setup returns an optimizer on GPU 0 over the model's parameters and the
// model on the same device and stream; it skips without a GPU.
func setup(t *testing.T, cfg model.Config, batch, seq int, lr float64) (*optimizer.Optimizer, *Model, *gpu.Backend) {
	be, err := gpu.New(0)
	cudatest.Unavailable(t, err, gpu.ErrUnavailable)
	t.Cleanup(func() { be.Close() })
	ocfg := optimizer.Config{GradType: collective.Float32, LR: optimizer.Constant(lr), Beta2: 0.95}
	o, err := optimizer.New(context.Background(), single.New(collective.Device, nil), be, cfg.Params(), cfg.Init(), ocfg)
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
	m, err := New(e, k, cfg, batch, seq)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return o, m, be
}

func randomTokens(n, vocab int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 3))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(vocab))
	}
	return out
}

// TestGPUModelMatchesCPU runs one forward and backward pass on the GPU and
// in the float64 model with the weights the optimizer gathered (the FP8
// ones dequantized: the very values the GEMMs read). The GPU quantizes
// activations (E4M3) and output gradients (E5M2) per tensor, so agreement
// is statistical: the loss within 2%, every parameter's gradient within
// 25% in relative L2 norm (typically a few percent).
func TestGPUModelMatchesCPU(t *testing.T) {
	const batch, seq = 2, 32
	o, m, be := setup(t, testShape, batch, seq, 1e-3)
	tokens, targets := randomTokens(batch*seq, testShape.Vocab, 1), randomTokens(batch*seq, testShape.Vocab, 2)
	if err := m.ZeroGrads(o.Grad); err != nil {
		t.Fatal(err)
	}
	if err := m.Forward(o.Param, tokens, targets, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(o.Param, o.Grad, nil); err != nil {
		t.Fatal(err)
	}
	loss, err := m.Loss()
	if err != nil {
		t.Fatal(err)
	}
	ref := &model.CPU{Config: testShape, W: map[string][]float64{}}
	for _, p := range testShape.Params() {
		w, err := o.Weights(p.Name)
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
	if math.Abs(loss-a.Loss) > 0.02*a.Loss {
		t.Errorf("loss %v on the GPU, %v in the reference", loss, a.Loss)
	}
	grads := ref.Backward(a)
	for _, p := range testShape.Params() {
		gv, err := o.Grad(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, gv.Data.Len())
		if err := be.Read(raw, gv.Data, 0); err != nil {
			t.Fatal(err)
		}
		var num, den float64
		for i, want := range grads[p.Name] {
			got := float64(math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24))
			num += (got - want) * (got - want)
			den += want * want
		}
		rel := math.Sqrt(num / den)
		t.Logf("%-22s relative L2 error %.4f", p.Name, rel)
		if !(rel < 0.25) {
			t.Errorf("%s: gradient relative L2 error %.3f", p.Name, rel)
		}
	}
}

// TestGPUTraining takes 30 AdamW steps on one repeated batch through the
// overlapped pipeline (GradReady during the backward pass, StepAsync,
// WaitGathers): the loss must fall below half its start.
func TestGPUTraining(t *testing.T) {
	const batch, seq = 2, 32
	o, m, _ := setup(t, testShape, batch, seq, 3e-3)
	ctx := context.Background()
	tokens := randomTokens(batch*seq, 16, 5) // a small alphabet: learnable
	targets := append(tokens[1:], tokens[0])
	var first, last float64
	for step := range 30 {
		if err := o.WaitGathers(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.ZeroGrads(o.Grad); err != nil {
			t.Fatal(err)
		}
		if err := m.Forward(o.Param, tokens, targets, 1); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(o.Param, o.Grad, o.GradReady); err != nil {
			t.Fatal(err)
		}
		if _, err := o.StepAsync(ctx); err != nil {
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
