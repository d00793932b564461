package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/optimizer/checkpoint"
	"github.com/distopt/distopt/safetensors"
)

// This file is `distopt export -as gpt2`: examples/gpt's model as Hugging
// Face transformers' GPT2LMHeadModel. The two are the same function:
// pre-LayerNorm blocks with epsilon 1e-5, a fused QKV projection whose
// output holds the queries, keys and values in that order and each head's
// columns together, attention scaled by 1/sqrt(head width), GELU in its
// tanh form ("gelu_new"), learned positions, and the output head tied to
// the token embedding. Only the names and the layout change: GPT-2's
// Conv1D stores a weight as [in, out], the transpose of examples/gpt's
// [out, in].

// gpt2Names maps a parameter name of a block of examples/gpt's model to
// GPT-2's, and whether the tensor is a Conv1D weight (transposed).
var gpt2Names = map[string]struct {
	name      string
	transpose bool
}{
	"ln1.weight": {"ln_1.weight", false}, "ln1.bias": {"ln_1.bias", false},
	"attn.qkv.weight": {"attn.c_attn.weight", true}, "attn.qkv.bias": {"attn.c_attn.bias", false},
	"attn.proj.weight": {"attn.c_proj.weight", true}, "attn.proj.bias": {"attn.c_proj.bias", false},
	"ln2.weight": {"ln_2.weight", false}, "ln2.bias": {"ln_2.bias", false},
	"mlp.fc.weight": {"mlp.c_fc.weight", true}, "mlp.fc.bias": {"mlp.c_fc.bias", false},
	"mlp.proj.weight": {"mlp.c_proj.weight", true}, "mlp.proj.bias": {"mlp.c_proj.bias", false},
}

// gpt2Top maps the parameters outside the blocks.
var gpt2Top = map[string]string{
	"embed.tokens": "transformer.wte.weight", "embed.positions": "transformer.wpe.weight",
	"final_ln.weight": "transformer.ln_f.weight", "final_ln.bias": "transformer.ln_f.bias",
}

// blockName splits "layer<l>.<part>".
var blockName = regexp.MustCompile(`^layer(\d+)\.(.+)$`)

// f32Tensor is one tensor of an export, as float32.
type f32Tensor struct {
	shape []int
	vals  []float32
}

// gpt2Tensor maps one of examples/gpt's tensors to GPT-2's name and
// layout; ok false for a name GPT-2 has no place for.
func gpt2Tensor(name string, t f32Tensor) (string, f32Tensor, bool) {
	if n, ok := gpt2Top[name]; ok {
		return n, t, true
	}
	m := blockName.FindStringSubmatch(name)
	if m == nil {
		return "", t, false
	}
	part, ok := gpt2Names[m[2]]
	if !ok {
		return "", t, false
	}
	if part.transpose {
		t = transpose(t)
	}
	return "transformer.h." + m[1] + "." + part.name, t, true
}

// transpose returns the [c, r] transpose of the [r, c] matrix t.
func transpose(t f32Tensor) f32Tensor {
	r, c := t.shape[0], t.shape[1]
	out := make([]float32, len(t.vals))
	for i := range r {
		for j := range c {
			out[j*r+i] = t.vals[i*c+j]
		}
	}
	return f32Tensor{shape: []int{c, r}, vals: out}
}

// exportGPT2 writes the FP32 masters of the checkpoint at path into dir as
// a GPT-2 model: model.safetensors (F32, or BF16 rounded to nearest even)
// and config.json. heads is the model's attention heads, which the
// tensors' shapes do not give.
func exportGPT2(path, dir string, heads int, dtype checkpoint.HFDType) (int, error) {
	if dtype == checkpoint.HFFP8 {
		return 0, errors.New("-as gpt2 writes -dtype f32 or bf16, not fp8")
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return 0, fmt.Errorf("%s already holds model.safetensors: %w", dir, fs.ErrExist)
	}
	tmp, err := os.MkdirTemp("", "distopt-gpt2-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	info, err := checkpoint.ExportHF(path, tmp, checkpoint.HFOptions{DType: checkpoint.HFF32, MaxShardBytes: math.MaxInt64})
	if err != nil {
		return 0, err
	}
	src := map[string]f32Tensor{}
	for _, f := range info.Files {
		if err := readF32(filepath.Join(tmp, f), src); err != nil {
			return 0, err
		}
	}
	cfg, err := gpt2Config(src, heads)
	if err != nil {
		return 0, err
	}
	out := map[string]f32Tensor{}
	for name, t := range src {
		n, t, ok := gpt2Tensor(name, t)
		if !ok {
			return 0, fmt.Errorf("%s: tensor %q is not one of examples/gpt's model", path, name)
		}
		out[n] = t
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	if err := writeSafetensors(filepath.Join(dir, "model.safetensors"), out, dtype); err != nil {
		return 0, err
	}
	js, _ := json.MarshalIndent(cfg, "", "  ") // strings, numbers and bools always marshal
	return info.Step, os.WriteFile(filepath.Join(dir, "config.json"), append(js, '\n'), 0o644)
}

// gpt2Config is the config.json of the model whose tensors are src: the
// sizes from their shapes, GPT-2's activation and epsilon as examples/gpt
// computes them, no dropout, the head tied, no special tokens (the byte
// vocabulary has none).
func gpt2Config(src map[string]f32Tensor, heads int) (map[string]any, error) {
	wte, wpe, fc := src["embed.tokens"], src["embed.positions"], src["layer0.mlp.fc.weight"]
	if len(wte.shape) != 2 || len(wpe.shape) != 2 || len(fc.shape) != 2 {
		return nil, errors.New("the checkpoint lacks examples/gpt's embed.tokens, embed.positions or layer0.mlp.fc.weight")
	}
	layers := 0
	for name := range src {
		if m := blockName.FindStringSubmatch(name); m != nil {
			l, _ := strconv.Atoi(m[1])
			layers = max(layers, l+1)
		}
	}
	hidden := wte.shape[1]
	if heads < 1 || hidden%heads != 0 {
		return nil, fmt.Errorf("-heads %d does not divide the hidden size %d (give examples/gpt's -heads or its preset's)", heads, hidden)
	}
	return map[string]any{
		"architectures": []string{"GPT2LMHeadModel"}, "model_type": "gpt2",
		"vocab_size": wte.shape[0], "n_positions": wpe.shape[0], "n_embd": hidden, "n_layer": layers, "n_head": heads, "n_inner": fc.shape[0],
		"activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
		"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
		"scale_attn_weights": true, "scale_attn_by_inverse_layer_idx": false, "reorder_and_upcast_attn": false,
		"tie_word_embeddings": true, "bos_token_id": nil, "eos_token_id": nil,
	}, nil
}

// readF32 reads every F32 tensor of the safetensors file at path into dst.
func readF32(path string, dst map[string]f32Tensor) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	h, _, err := safetensors.Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return err
	}
	for _, t := range h.Tensors {
		if t.DType != safetensors.F32 {
			return fmt.Errorf("%s: %s is %v, want F32", path, t.Name, t.DType)
		}
		raw := b[h.DataOffset+t.Begin : h.DataOffset+t.End]
		v := make([]float32, len(raw)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		dst[t.Name] = f32Tensor{shape: t.Shape, vals: v}
	}
	return nil
}

// writeSafetensors writes tensors, sorted by name, into path (through a
// temporary file) as F32 or BF16, with metadata {"format": "pt"}.
func writeSafetensors(path string, tensors map[string]f32Tensor, dtype checkpoint.HFDType) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	st := safetensors.F32
	if dtype == checkpoint.HFBF16 {
		st = safetensors.BF16
	}
	specs := make([]safetensors.Spec, len(names))
	for i, n := range names {
		specs[i] = safetensors.Spec{Name: n, DType: st, Shape: tensors[n].shape}
	}
	_, body, err := safetensors.Encode(specs, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	for _, n := range names {
		for _, v := range tensors[n].vals {
			if st == safetensors.BF16 {
				body = binary.LittleEndian.AppendUint16(body, bf16.FromFloat32(v))
			} else {
				body = binary.LittleEndian.AppendUint32(body, math.Float32bits(v))
			}
		}
	}
	if err := os.WriteFile(path+".tmp", body, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
