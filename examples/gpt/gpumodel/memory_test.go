package gpumodel

import (
	"errors"
	"fmt"
	"testing"

	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
)

// TestPredictMemory checks PredictMemory's FP8 linear inputs against
// closed forms written out here (per tensor: tokens x (3h + f) bytes plus
// 4 bytes of scale per layer input; 1x128 blocks: plus 4 bytes per block
// of 128 along each row; the attention output's alone under Recompute;
// doubled, with the transposes' scales, under KeepTransposed, and for the
// layers of KeepTransposedLayers alone) and the
// other categories against the model's buffers counted by hand: the
// float32 LayerNorm and GELU outputs in the scratch with Unfused or
// Recompute only, a word for the fused kernels' amax unless Unfused (the
// fused backward folds the output gradients' amax there, Recompute
// included); with ActGradBF16, GELU's bfloat16 gradients in the bytes of
// the float32 dfc alone.
func TestPredictMemory(t *testing.T) {
	for _, ffn := range []int{640, 1024} {
		t.Run(fmt.Sprint("ffn=", ffn), func(t *testing.T) { predictMemory(t, ffn) })
	}
}

// predictMemory is TestPredictMemory with FFN ffn: at 640 dqkv (float32,
// 3 x 256 wide) has a buffer of its own, at 1024 it lives in dfc's
// (dqkvInDFC).
func predictMemory(t *testing.T, ffn int) {
	cfg := model.Config{Layers: 3, Hidden: 256, Heads: 4, FFN: ffn, Vocab: 256, Seq: 64}
	const batch, seq = 3, 48
	n, h, f, v := batch*seq, cfg.Hidden, cfg.FFN, cfg.Vocab
	blocks := func(cols int) int { return 4 * n * ((cols + 127) / 128) }
	tileT := func(cols int) int { return 4 * cols * ((n + 127) / 128) } // 1x128 blocks of the transposed input
	cur := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	tiles := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}
	for _, c := range []struct {
		name  string
		o     Options
		want  int
		fused bool // the fused forward: no float32 LayerNorm or GELU output
		bf16  bool // ActGradBF16
	}{
		{"per-tensor", Options{Recipe: cur}, n*(3*h+f) + 16, true, false},
		{"per-tensor unfused", Options{Recipe: cur, Unfused: true}, n*(3*h+f) + 16, false, false},
		{"per-tensor recompute", Options{Recipe: cur, Recompute: true}, n*h + 4, false, false},
		{"per-tensor keep", Options{Recipe: cur, KeepTransposed: true}, 2 * (n*(3*h+f) + 16), true, false},
		{"per-tensor both", Options{Recipe: cur, Recompute: true, KeepTransposed: true}, 2 * (n*h + 4), false, false},
		{"delayed", Options{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed}}, n*(3*h+f) + 16, true, false},
		{"blocks", Options{Recipe: tiles}, n*(3*h+f) + 3*blocks(h) + blocks(f), true, false},
		{"blocks unfused", Options{Recipe: tiles, Unfused: true}, n*(3*h+f) + 3*blocks(h) + blocks(f), false, false},
		{"blocks recompute", Options{Recipe: tiles, Recompute: true}, n*h + blocks(h), false, false},
		{"blocks keep", Options{Recipe: tiles, KeepTransposed: true}, 2*n*(3*h+f) + 3*blocks(h) + blocks(f) + 3*tileT(h) + tileT(f), true, false},
		{"per-tensor bf16 gradients", Options{Recipe: cur, ActGradBF16: true}, n*(3*h+f) + 16, true, true},
		{"blocks recompute bf16 gradients", Options{Recipe: tiles, Recompute: true, ActGradBF16: true}, n*h + blocks(h), false, true},
		{"per-tensor fused dy", Options{Recipe: cur, FuseDY: true}, n*(3*h+f) + 16, true, false},
		{"per-tensor keep mlp.proj", Options{Recipe: cur, KeepTransposedLayers: []string{"mlp.proj"}}, n*(3*h+f) + 16 + n*f + 4, true, false},
		{"per-tensor keep attn", Options{Recipe: cur, KeepTransposedLayers: []string{"attn.qkv", "attn.proj"}}, n*(3*h+f) + 16 + 2*(n*h+4), true, false},
		{"blocks keep mlp.proj", Options{Recipe: tiles, KeepTransposedLayers: []string{"mlp.proj"}}, n*(3*h+f) + 3*blocks(h) + blocks(f) + n*f + tileT(f), true, false},
	} {
		c.o.Attention = AttentionGEMM // TestPredictMemoryFlash has the default's attention
		m, err := PredictMemory(cfg, batch, seq, c.o)
		if err != nil {
			t.Fatal(err)
		}
		if m.LinearInputs != c.want {
			t.Errorf("%s: FP8 linear inputs %d bytes per layer, want %d", c.name, m.LinearInputs, c.want)
		}
		pn := batch * cfg.Heads * seq * seq
		want := Memory{Layers: 3, LinearInputs: c.want, LinearInputsBF16: 2 * n * (3*h + f),
			Saved: 4*(n*(h+h)+4*n) + 2*n*(3*h+f), Probs: 4 * pn, // x, x2, statistics; qkv, fc in bfloat16
			Final: 4 * (n*h + n*h + n + n + n*v + n*v + n),
			Scratch: 4*(n*h+ // att
				n+n+n+v+1+ // tok, tgt, order, start
				n*h+n*h+n*h+pn+n*f+n*f) + // dx, dln, dtmp, ds, dfc, dg
				attnWorkspace + 4*4*n*h, // attention (TF32, packed): cuBLASLt workspace, q, k, v, output heads
			Engine: m.Engine}
		if 3*h > f {
			want.Scratch += 4 * n * 3 * h // dqkv, too large to share dfc's buffer
		}
		if !c.o.Unfused {
			want.Scratch += 4 // the amax of the fused producers
		}
		if !c.fused {
			want.Scratch += 4 * (n*h + n*f) // ln, gelu
		}
		if c.bf16 {
			want.Scratch -= 4 * n * f // dg: bfloat16 in dfc's second half, dfc in its first
		}
		if m != want {
			t.Errorf("%s: %+v, want %+v", c.name, m, want)
		}
		if m.Engine <= 0 {
			t.Errorf("%s: no engine buffer predicted", c.name)
		}
	}
	if _, err := PredictMemory(cfg, batch, seq, Options{}); err == nil {
		t.Error("PredictMemory without a recipe: no error")
	}
	if _, err := PredictMemory(cfg, batch, seq, Options{Recipe: cur, Unfused: true, ActGradBF16: true}); err == nil {
		t.Error("ActGradBF16 with Unfused: no error")
	}
	if _, err := PredictMemory(cfg, batch, seq, Options{Recipe: cur, Unfused: true, FuseDY: true}); err == nil {
		t.Error("FuseDY with Unfused: no error")
	}
	if _, err := PredictMemory(cfg, batch, seq, Options{Recipe: tiles, FuseDY: true}); err == nil {
		t.Error("FuseDY with 128x128 weights (1x128 activations): no error")
	}
	// FuseDY's transposed codes join the engine's activation buffer: the
	// largest output gradient's (attn.qkv's or mlp.fc's) codes once more.
	a, err1 := PredictMemory(cfg, batch, seq, Options{Recipe: cur})
	b, err2 := PredictMemory(cfg, batch, seq, Options{Recipe: cur, FuseDY: true})
	if err := errors.Join(err1, err2); err != nil || b.Engine-a.Engine != n*max(3*h, f) {
		t.Errorf("engine activation buffer %d bytes with FuseDY, %d without (%v): want %d more", b.Engine, a.Engine, err, n*max(3*h, f))
	}
}

// TestPredictMemoryGPT reports the activation memory of the 124M and 1.3B
// shapes at the example's default batch (4 sequences of the full context)
// for every recipe and option, and checks issue 23's goal: the FP8 linear
// inputs at most 0.52x of bfloat16 without KeepTransposed.
func TestPredictMemoryGPT(t *testing.T) {
	for _, preset := range []string{"small", "1.3b"} {
		cfg, err := model.Preset(preset)
		if err != nil {
			t.Fatal(err)
		}
		for _, rc := range recipes {
			for _, o := range []Options{{}, {Unfused: true}, {Recompute: true}, {KeepTransposed: true}, {ActGradBF16: true}} {
				o.Recipe = rc.r
				m, err := PredictMemory(cfg, 4, cfg.Seq, o)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s %s unfused=%v recompute=%v keep=%v act-grad-bf16=%v: %v", preset, rc.name, o.Unfused, o.Recompute, o.KeepTransposed, o.ActGradBF16, m)
				if !o.KeepTransposed && m.LinearRatio() > 0.52 {
					t.Errorf("%s %s: FP8 linear inputs at %.4fx of bfloat16", preset, rc.name, m.LinearRatio())
				}
			}
		}
	}
}

// TestActivationRecipes checks the activations' scaling per weight recipe.
func TestActivationRecipes(t *testing.T) {
	for _, c := range []struct {
		w    fp8.Scaling
		want fp8.Scaling
	}{{fp8.TensorCurrent, fp8.TensorCurrent}, {fp8.TensorDelayed, fp8.TensorCurrent}, {fp8.Block128x128, fp8.Block1x128},
		{fp8.Block1x128, fp8.TensorCurrent}, {fp8.MXFP8, fp8.TensorCurrent}} {
		x, dy, err := ActivationRecipes(fp8.Recipe{Format: fp8.E4M3, Scaling: c.w})
		if err != nil {
			t.Fatal(err)
		}
		if x.Scaling != c.want || dy.Scaling != c.want || x.Format != fp8.E4M3 || dy.Format != fp8.E5M2 {
			t.Errorf("weights %v: activations %v, gradients %v, want %v E4M3 and E5M2", c.w, x, dy, c.want)
		}
	}
	if _, _, err := ActivationRecipes(fp8.Recipe{}); err == nil {
		t.Error("a zero recipe: no error")
	}
}
