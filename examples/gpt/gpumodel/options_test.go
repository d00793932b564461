package gpumodel

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
)

// TestFlashHeadWidths checks that flash attention, the default, refuses
// head widths its kernels do not take, in NewWith (before touching the
// device: nil engine and kernels) and in PredictMemory, with an error that
// names the width and AttentionGEMM; that AttentionGEMM takes them; that
// widths 64 and 128 pass; and that an unknown Attention is refused.
func TestFlashHeadWidths(t *testing.T) {
	cur := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	for _, c := range []struct {
		hidden, heads int
		ok            bool
	}{{128, 4, false}, {128, 8, false}, {192, 2, false}, {256, 1, false}, {128, 2, true}, {256, 2, true}, {384, 3, true}} {
		cfg := model.Config{Layers: 1, Hidden: c.hidden, Heads: c.heads, FFN: 256, Vocab: 256, Seq: 32}
		_, err := PredictMemory(cfg, 2, 32, Options{Recipe: cur})
		if c.ok {
			if err != nil {
				t.Errorf("hidden %d in %d heads: %v", c.hidden, c.heads, err)
			}
			continue
		}
		want := []string{fmt.Sprintf("head width %d ", c.hidden/c.heads), "AttentionGEMM"}
		_, errNew := NewWith(nil, nil, cfg, 2, 32, Options{})
		for _, e := range []error{err, errNew} {
			if e == nil || !strings.Contains(e.Error(), want[0]) || !strings.Contains(e.Error(), want[1]) {
				t.Errorf("hidden %d in %d heads: error %v, want one naming %q and %q", c.hidden, c.heads, e, want[0], want[1])
			}
		}
		if _, err := PredictMemory(cfg, 2, 32, Options{Recipe: cur, Attention: AttentionGEMM}); err != nil {
			t.Errorf("hidden %d in %d heads with AttentionGEMM: %v", c.hidden, c.heads, err)
		}
	}
	if _, err := NewWith(nil, nil, testShape, 2, 32, Options{Attention: 7}); err == nil {
		t.Error("Attention(7): no error")
	}
}

// TestParseAttention checks the names of Attention both ways.
func TestParseAttention(t *testing.T) {
	for _, a := range []Attention{AttentionFlash, AttentionGEMM} {
		for _, s := range []string{a.String(), strings.ToUpper(a.String())} {
			if got, err := ParseAttention(s); err != nil || got != a {
				t.Errorf("ParseAttention(%q) = %v, %v; want %v", s, got, err, a)
			}
		}
	}
	if AttentionFlash.String() != "flash" || AttentionGEMM.String() != "gemm" {
		t.Errorf("names %q, %q; want flash, gemm", AttentionFlash, AttentionGEMM)
	}
	for _, s := range []string{"", "fused", "tf32"} {
		if _, err := ParseAttention(s); err == nil {
			t.Errorf("ParseAttention(%q): no error", s)
		}
	}
}

// TestParseHeadPrecision checks the names of the head precisions both
// ways (any case), that other names are refused, and that NewWith (before
// touching the device) and PredictMemory refuse a HeadPrecision outside
// the two; and that HeadBF16 adds the head's weight gradient (vocab x
// hidden float32) to the predicted scratch and its bfloat16 input and
// logits' gradient (2n(h+v) bytes) to Final, and nothing else.
func TestParseHeadPrecision(t *testing.T) {
	for _, p := range []HeadPrecision{HeadFP32, HeadBF16} {
		for _, s := range []string{p.String(), strings.ToUpper(p.String())} {
			if got, err := ParseHeadPrecision(s); err != nil || got != p {
				t.Errorf("ParseHeadPrecision(%q) = %v, %v; want %v", s, got, err, p)
			}
		}
	}
	if HeadFP32.String() != "fp32" || HeadBF16.String() != "bf16" {
		t.Errorf("names %q, %q; want fp32, bf16", HeadFP32, HeadBF16)
	}
	for _, s := range []string{"", "fp16", "bfloat16"} {
		if _, err := ParseHeadPrecision(s); err == nil {
			t.Errorf("ParseHeadPrecision(%q): no error", s)
		}
	}
	cur := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	cfg := model.Config{Layers: 1, Hidden: 128, Heads: 2, FFN: 256, Vocab: 300, Seq: 32}
	if _, err := PredictMemory(cfg, 2, 32, Options{Recipe: cur, Head: 2}); err == nil || !strings.Contains(err.Error(), "Head") {
		t.Errorf("PredictMemory with Head 2: %v, want an error naming Head", err)
	}
	if _, err := NewWith(nil, nil, cfg, 2, 32, Options{Head: -1}); err == nil || !strings.Contains(err.Error(), "Head") {
		t.Errorf("NewWith with Head -1: %v, want an error naming Head", err)
	}
	fp32, err := PredictMemory(cfg, 2, 32, Options{Recipe: cur})
	if err != nil {
		t.Fatal(err)
	}
	bf16, err := PredictMemory(cfg, 2, 32, Options{Recipe: cur, Head: HeadBF16})
	if err != nil {
		t.Fatal(err)
	}
	want := fp32
	n := 2 * 32
	want.Scratch += 4 * cfg.Vocab * cfg.Hidden     // the weight gradient before rounding
	want.Final += 2 * n * (cfg.Hidden + cfg.Vocab) // the bfloat16 head input and logits' gradient
	if bf16 != want {
		t.Errorf("HeadBF16: %+v, want %+v", bf16, want)
	}
}

// TestKeepTransposedLayers checks that KeepTransposedLayers takes the four
// linear layers' names and refuses any other, naming it, before any
// memory is counted; and that it keeps only the named layers' transposes:
// all four named predict KeepTransposed's bytes.
func TestKeepTransposedLayers(t *testing.T) {
	cfg := model.Config{Layers: 2, Hidden: 128, Heads: 2, FFN: 512, Vocab: 256, Seq: 64}
	cur := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	for _, bad := range [][]string{{"mlp.fc2"}, {"attn.qkv", ""}, {"MLP.PROJ"}} {
		_, err := PredictMemory(cfg, 2, 64, Options{Recipe: cur, KeepTransposedLayers: bad})
		if err == nil || !strings.Contains(err.Error(), "KeepTransposedLayers") {
			t.Errorf("KeepTransposedLayers %q: error %v, want one naming KeepTransposedLayers", bad, err)
		}
	}
	all, err := PredictMemory(cfg, 2, 64, Options{Recipe: cur, KeepTransposed: true})
	if err != nil {
		t.Fatal(err)
	}
	named, err := PredictMemory(cfg, 2, 64, Options{Recipe: cur, KeepTransposedLayers: linearNames[:]})
	if err != nil {
		t.Fatal(err)
	}
	none, err := PredictMemory(cfg, 2, 64, Options{Recipe: cur})
	if err != nil {
		t.Fatal(err)
	}
	if named != all || none.LinearInputs >= all.LinearInputs {
		t.Errorf("all four named: %+v; KeepTransposed: %+v; none: %+v", named, all, none)
	}
}

// TestCuDNNHeadWidth checks that AttentionCuDNN refuses a head width that
// is no multiple of 8 with an error matching cudnn.ErrNotSupported (so
// that examples/gpt's -attention auto takes flash, whose own check then
// names the widths it takes) and pointing to AttentionGEMM.
func TestCuDNNHeadWidth(t *testing.T) {
	cfg := model.Config{Layers: 1, Hidden: 80, Heads: 4, FFN: 320, Vocab: 256, Seq: 64}
	o := Options{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, Attention: AttentionCuDNN}
	_, err := PredictMemory(cfg, 2, 64, o)
	if !errors.Is(err, cudnn.ErrNotSupported) || !strings.Contains(err.Error(), "-attention gemm") {
		t.Errorf("head width 20 with cuDNN: %v, want an error matching cudnn.ErrNotSupported that names -attention gemm", err)
	}
	cfg.Hidden, cfg.FFN = 64, 256 // width 16
	if _, err := PredictMemory(cfg, 2, 64, o); err != nil {
		t.Errorf("head width 16 with cuDNN: %v", err)
	}
}
