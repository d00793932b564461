package gpumodel

import (
	"context"
	"math"
	"testing"

	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
)

// TestCuDNNOption checks AttentionCuDNN's name, its refusal of head widths
// that are not multiples of 8, and that PredictMemory counts what it
// allocates: the kept output and statistics of the fused kernels, and for
// scratch the bfloat16 output gradient and dqkv, cuDNN's workspace bound,
// the row sums and dq's float32 accumulator (closed forms written out
// here).
func TestCuDNNOption(t *testing.T) {
	if a, err := ParseAttention("cuDNN"); err != nil || a != AttentionCuDNN || a.String() != "cudnn" {
		t.Errorf("ParseAttention(cuDNN) = %v, %v", a, err)
	}
	cur := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	odd := model.Config{Layers: 1, Hidden: 100, Heads: 4, FFN: 256, Vocab: 256, Seq: 64}
	if _, err := PredictMemory(odd, 2, 64, Options{Recipe: cur, Attention: AttentionCuDNN}); err == nil {
		t.Error("head width 25 with AttentionCuDNN: no error")
	}
	cfg := model.Config{Layers: 3, Hidden: 256, Heads: 4, FFN: 640, Vocab: 256, Seq: 256}
	const batch, seq = 2, 256
	flash, err := PredictMemory(cfg, batch, seq, Options{Recipe: cur})
	if err != nil {
		t.Fatal(err)
	}
	dnn, err := PredictMemory(cfg, batch, seq, Options{Recipe: cur, Attention: AttentionCuDNN})
	if err != nil {
		t.Fatal(err)
	}
	n, rows, d := batch*seq*cfg.Hidden, batch*cfg.Heads*seq, cfg.HeadDim()
	wantScratch := flash.Scratch - 4*2*n - 4*rows + // the fused kernels' packed heads and row sums
		2*n + 6*n + 64<<20 + 4*rows + 4*rows*d
	if dnn.Probs != flash.Probs || dnn.Scratch != wantScratch {
		t.Errorf("cudnn: kept %d, scratch %d; want %d and %d", dnn.Probs, dnn.Scratch, flash.Probs, wantScratch)
	}
}

// TestCuDNNTrainsLikeFlash trains the same model from the same weights on
// the same tokens for 30 steps with cuDNN's attention and with the fused
// kernels: the losses must stay within 2% of each other at every step
// (both round q, k, v, p and the gradients to bfloat16, in other orders)
// and fall, as TestGPUTraining's. It skips without a GPU or cuDNN.
func TestCuDNNTrainsLikeFlash(t *testing.T) {
	cfg := testShape
	cfg.Seq = 128
	flash := trainLosses(t, cfg, AttentionFlash)
	dnn := trainLosses(t, cfg, AttentionCuDNN)
	for i := range flash {
		if e := math.Abs(dnn[i]-flash[i]) / flash[i]; !(e < 0.02) {
			t.Errorf("step %d: loss %.5f with cuDNN, %.5f with the fused kernels", i+1, dnn[i], flash[i])
		}
	}
	if last := dnn[len(dnn)-1]; !(last < dnn[0]/2) {
		t.Errorf("cuDNN: loss %v after %d steps, %v at the first", last, len(dnn), dnn[0])
	}
}

// trainLosses returns the losses of 30 steps of a fresh model of cfg
// with attention at on batch 2 x 128 tokens of a small alphabet.
func trainLosses(t *testing.T, cfg model.Config, at Attention) []float64 {
	const batch, seq = 2, 128
	r := newRig(t, cfg, 3e-3, recipes[0].r)
	m, err := NewWith(r.e, r.k, cfg, batch, seq, Options{Attention: at})
	cudatest.Unavailable(t, err, cudnn.ErrNoLibrary, cudnn.ErrTooOld)
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	tokens := randomTokens(batch*seq, 16, 7)
	targets := append(tokens[1:], tokens[0])
	var losses []float64
	for range 30 {
		steps := []func() error{
			func() error { return r.o.WaitGathers(ctx) },
			func() error { return m.ZeroGrads(r.o.Grad) },
			func() error { return m.Forward(r.o.Param, tokens, targets, 1) },
			func() error { return m.Backward(r.o.Param, r.o.Grad, r.o.GradReady) },
			func() error { _, err := r.o.StepAsync(ctx); return err },
		}
		for _, s := range steps {
			if err := s(); err != nil {
				t.Fatal(err)
			}
		}
		loss, err := m.Loss()
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss)
	}
	t.Logf("%v: losses %.4f", at, losses)
	return losses
}
