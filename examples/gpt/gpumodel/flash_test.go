package gpumodel

import (
	"testing"

	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
)

// TestPredictMemoryFlash checks PredictMemory with flash attention (the
// default) against the GEMM attention's prediction and
// the bytes worked out here: per layer the bfloat16 output (2 bytes per
// element of batch·seq·h) and a float32 logsumexp per row of every head
// instead of the float32 probabilities (4·batch·heads·seq²); in the
// scratch no score gradient (4·batch·heads·seq² less), and the fused
// kernels' buffers (packed bfloat16 q, k, v, dy: 4·2·batch·seq·h, and a
// float32 per row of every head) instead of the cuBLASLt workspace and
// the four float32 packed heads. Everything else is unchanged. At the
// 1.3B shape (batch 4, seq 2048, 16 heads of 128) the layer's attention
// memory falls from 1 GiB to 32.5 MiB.
func TestPredictMemoryFlash(t *testing.T) {
	cur := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	cfg := model.Config{Layers: 3, Hidden: 256, Heads: 4, FFN: 640, Vocab: 256, Seq: 64}
	big, err := model.Preset("1.3b")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg        model.Config
		batch, seq int
	}{{cfg, 3, 48}, {cfg, 2, 64}, {big, 4, big.Seq}} {
		n, h, heads := c.batch*c.seq, c.cfg.Hidden, c.cfg.Heads
		pn, rows := c.batch*heads*c.seq*c.seq, c.batch*heads*c.seq
		base, err := PredictMemory(c.cfg, c.batch, c.seq, Options{Recipe: cur, Attention: AttentionGEMM})
		if err != nil {
			t.Fatal(err)
		}
		got, err := PredictMemory(c.cfg, c.batch, c.seq, Options{Recipe: cur})
		if err != nil {
			t.Fatal(err)
		}
		want := base
		want.Probs = 2*n*h + 4*rows
		want.Scratch = base.Scratch - 4*pn - (attnWorkspace + 4*4*n*h) + (4*2*n*h + 4*rows)
		if got != want {
			t.Errorf("%+v batch %d seq %d: %+v, want %+v", c.cfg, c.batch, c.seq, got, want)
		}
		if base.Probs != 4*pn {
			t.Errorf("GEMM attention: probabilities %d bytes, want %d", base.Probs, 4*pn)
		}
		t.Logf("%d layers, batch %d, seq %d: per layer %.1f MiB -> %.1f MiB, per step %.2f GiB -> %.2f GiB",
			c.cfg.Layers, c.batch, c.seq, float64(base.PerLayer())/(1<<20), float64(got.PerLayer())/(1<<20),
			float64(base.Step())/(1<<30), float64(got.Step())/(1<<30))
	}
	if want := 32*1<<20 + 512*1<<10; attnKeptBytes(4, 2048, 2048, 16, attnFlash) != want {
		t.Errorf("1.3B: flash keeps %d bytes per layer, want %d", attnKeptBytes(4, 2048, 2048, 16, attnFlash), want)
	}
}
