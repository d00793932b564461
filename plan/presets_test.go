package plan

import (
	"strings"
	"testing"
)

// TestPresetCounts checks every preset against the parameter count
// published for the model (Hugging Face's count of the released weights;
// GPT-2's with its tied head, without the attention-mask buffers).
func TestPresetCounts(t *testing.T) {
	published := map[string]int64{
		"gpt2":         124_439_808,
		"gpt2-medium":  354_823_168,
		"gpt2-large":   774_030_080,
		"gpt2-xl":      1_557_611_200,
		"llama-2-7b":   6_738_415_616,
		"llama-2-13b":  13_015_864_320,
		"llama-2-70b":  68_976_648_192,
		"llama-3-8b":   8_030_261_248,
		"llama-3-70b":  70_553_706_496,
		"llama-3.2-1b": 1_235_814_400,
		"llama-3.2-3b": 3_212_749_824,
	}
	for _, p := range Presets {
		if err := p.Model.Validate(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		want, ok := published[p.Name]
		if !ok {
			continue
		}
		if got := p.Model.NumParams(); got != want {
			t.Errorf("%s: %d parameters, published %d", p.Name, got, want)
		}
	}
	// GPT 1.3B has no published weights: the GPT-3 XL shape with an
	// untied head, counted by hand: embeddings (50304 + 2048) x 2048, 24
	// blocks of 12h^2 + 13h, final norm 2h, head 50304 x 2048.
	h := int64(2048)
	if got, want := GPT13B.NumParams(), (50304+2048)*h+24*(12*h*h+13*h)+2*h+50304*h; got != want {
		t.Errorf("GPT13B: %d parameters, want %d", got, want)
	}
}

// TestTiedUntied checks that tying removes exactly the head (vocabulary x
// hidden elements) and nothing else, in both families.
func TestTiedUntied(t *testing.T) {
	g := GPT13B
	gt := g
	gt.Tied = true
	if d := g.NumParams() - gt.NumParams(); d != int64(g.Vocab*g.Hidden) {
		t.Errorf("GPT: tying removes %d elements", d)
	}
	l, _ := LookupPreset("llama-3.2-1b")
	lu := l.Model.(LlamaConfig)
	lu.Tied = false
	if d := lu.NumParams() - l.Model.NumParams(); d != int64(lu.Vocab*lu.Hidden) {
		t.Errorf("Llama: untying adds %d elements", d)
	}
	for _, p := range l.Model.Params() {
		if p.Name == "lm_head.weight" {
			t.Error("tied Llama has lm_head.weight")
		}
	}
}

// TestLlamaShapes checks grouped-query attention and the SwiGLU FFN on
// Llama-3-8B's layer 0 (published shapes of its weights), and that only
// the RMSNorm weights are high precision.
func TestLlamaShapes(t *testing.T) {
	p, err := LookupPreset("Llama_3_8B")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int{
		"model.layers.0.self_attn.q_proj.weight": {4096, 4096},
		"model.layers.0.self_attn.k_proj.weight": {1024, 4096},
		"model.layers.0.self_attn.v_proj.weight": {1024, 4096},
		"model.layers.0.self_attn.o_proj.weight": {4096, 4096},
		"model.layers.0.mlp.gate_proj.weight":    {14336, 4096},
		"model.layers.0.mlp.up_proj.weight":      {14336, 4096},
		"model.layers.0.mlp.down_proj.weight":    {4096, 14336},
		"model.embed_tokens.weight":              {128256, 4096},
		"lm_head.weight":                         {128256, 4096},
	}
	found := 0
	for _, q := range p.Model.Params() {
		if q.HighPrecision != strings.Contains(q.Name, "norm") {
			t.Errorf("%s: high precision %v", q.Name, q.HighPrecision)
		}
		if w, ok := want[q.Name]; ok {
			found++
			if len(q.Shape) != 2 || q.Shape[0] != w[0] || q.Shape[1] != w[1] {
				t.Errorf("%s: shape %v, want %v", q.Name, q.Shape, w)
			}
		}
	}
	if found != len(want) {
		t.Errorf("found %d of %d tensors", found, len(want))
	}
}

func TestLookup(t *testing.T) {
	for name, want := range map[string]string{"GPT2-Small": "gpt2", "llama-3.1-8b": "llama-3-8b", "LLAMA-2-70B": "llama-2-70b"} {
		p, err := LookupPreset(name)
		if err != nil || p.Name != want {
			t.Errorf("%q: %v %v, want %s", name, p.Name, err, want)
		}
	}
	if _, err := LookupPreset("llama-9"); err == nil || !strings.Contains(err.Error(), "llama-3-8b") {
		t.Errorf("unknown preset: %v", err)
	}
	for name, want := range map[string]string{"H100": "h100-80gb", "a100_80gb": "a100-80gb", "B200": "b200", "h200": "h200"} {
		g, err := LookupGPU(name)
		if err != nil || g.Name != want {
			t.Errorf("%q: %v %v, want %s", name, g.Name, err, want)
		}
	}
	if _, err := LookupGPU("tpu"); err == nil || !strings.Contains(err.Error(), "h100-80gb") {
		t.Errorf("unknown GPU: %v", err)
	}
}

func TestParseCount(t *testing.T) {
	good := map[string]int64{
		"70e9": 70_000_000_000, "70B": 70_000_000_000, "70b": 70_000_000_000, "1.3B": 1_300_000_000,
		"350M": 350_000_000, "1.5k": 1500, "2T": 2_000_000_000_000, "1000003": 1000003, " 7G ": 7_000_000_000,
		"1.3e9": 1_300_000_000, "9007199254740993": 9007199254740993, "1.000000001B": 1_000_000_001, // exact, beyond float64
	}
	for s, want := range good {
		if got, err := ParseCount(s); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", s, got, err, want)
		}
	}
	for s, want := range map[string]string{
		"": "want a number", "B": "want a number", "70X": "want a number", "0x10": "want a number", "1e3k": "want a number",
		"-5": "not positive", "0": "not positive", "0.4": "whole number", "1/2": "want a number", "1.5": "whole number", "1.00000001K": "whole number",
		"inf": "want a number", "NaN": "want a number", "1e20": "int64",
	} {
		if _, err := ParseCount(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", s, err, want)
		}
	}
}
