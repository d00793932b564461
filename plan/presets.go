package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distopt/distopt/optimizer"
)

// Model is a model shape: its parameters and a one-line description.
// GPTConfig and LlamaConfig are Models.
type Model interface {
	Params() []optimizer.Param
	NumParams() int64
	Describe() string
	Validate() error
}

// Preset is a named model shape.
type Preset struct {
	Name  string
	Model Model
}

// gpt2 is the GPT-2 shape of L layers and hidden size h (FFN 4h, 1024
// positions, the 50257-token vocabulary, tied embeddings), as in the
// configurations OpenAI published with the weights.
func gpt2(l, h int) GPTConfig {
	return GPTConfig{Layers: l, Hidden: h, FFN: 4 * h, Vocab: 50257, Positions: 1024, Tied: true}
}

// Presets are the shapes people plan for, by name. The shapes are those of
// the published configurations (Hugging Face config.json of each model);
// TestPresetCounts checks them against the published parameter counts.
var Presets = []Preset{
	{"gpt2", gpt2(12, 768)}, // 124M; also "gpt2-small"
	{"gpt2-medium", gpt2(24, 1024)},
	{"gpt2-large", gpt2(36, 1280)},
	{"gpt2-xl", gpt2(48, 1600)},
	{"gpt-1.3b", GPT13B}, // examples/multigpu's default, untied head
	{"llama-2-7b", LlamaConfig{Layers: 32, Hidden: 4096, FFN: 11008, Vocab: 32000, Heads: 32, KVHeads: 32}},
	{"llama-2-13b", LlamaConfig{Layers: 40, Hidden: 5120, FFN: 13824, Vocab: 32000, Heads: 40, KVHeads: 40}},
	{"llama-2-70b", LlamaConfig{Layers: 80, Hidden: 8192, FFN: 28672, Vocab: 32000, Heads: 64, KVHeads: 8}},
	{"llama-3-8b", LlamaConfig{Layers: 32, Hidden: 4096, FFN: 14336, Vocab: 128256, Heads: 32, KVHeads: 8}},
	{"llama-3-70b", LlamaConfig{Layers: 80, Hidden: 8192, FFN: 28672, Vocab: 128256, Heads: 64, KVHeads: 8}},
	{"llama-3.2-1b", LlamaConfig{Layers: 16, Hidden: 2048, FFN: 8192, Vocab: 128256, Heads: 32, KVHeads: 8, Tied: true}},
	{"llama-3.2-3b", LlamaConfig{Layers: 28, Hidden: 3072, FFN: 8192, Vocab: 128256, Heads: 24, KVHeads: 8, Tied: true}},
}

// presetAliases are other spellings of preset names.
var presetAliases = map[string]string{
	"gpt2-small":    "gpt2",
	"gpt-2":         "gpt2",
	"gpt3-xl":       "gpt-1.3b",
	"llama-3.1-8b":  "llama-3-8b",
	"llama-3.1-70b": "llama-3-70b",
}

// LookupPreset returns the preset of the given name, compared
// case-insensitively, "_" and "-" alike. An unknown name gives an error
// listing the known ones.
func LookupPreset(name string) (Preset, error) {
	return lookup("model", name, Presets, func(p Preset) string { return p.Name }, presetAliases)
}

// lookup finds the item named name (or an alias of it) in items, names
// compared case-insensitively with "_" and "-" alike; an unknown name
// gives an error naming the kind of item and listing the known names.
func lookup[T any](kind, name string, items []T, nameOf func(T) string, aliases map[string]string) (T, error) {
	key := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "_", "-")
	if a, ok := aliases[key]; ok {
		key = a
	}
	if i := slices.IndexFunc(items, func(it T) bool { return nameOf(it) == key }); i >= 0 {
		return items[i], nil
	}
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = nameOf(it)
	}
	var zero T
	return zero, fmt.Errorf("plan: unknown %s %q: want one of %s", kind, name, strings.Join(names, ", "))
}

// PresetNames lists the names of Presets in order.
func PresetNames() []string {
	names := make([]string, len(Presets))
	for i, p := range Presets {
		names[i] = p.Name
	}
	return names
}
