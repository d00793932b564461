package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
	"github.com/distopt/distopt/optimizer/cpu"
)

// gpt2Shape is the model of the tests: two layers, two heads, an FFN not
// 4 x hidden, fewer positions than tokens in the vocabulary.
var gpt2Shape = model.Config{Layers: 2, Hidden: 32, Heads: 2, FFN: 48, Vocab: 256, Seq: 16}

// gpt2Init gives every element of every tensor its own value (norm
// weights near 1, biases not zero), so that a tensor put in another's
// place, or transposed wrongly, changes the function.
func gpt2Init(name string, offset int, dst []float32) error {
	h := fnv.New64a()
	h.Write([]byte(name))
	base := 0.0
	if n := len(name); n > 6 && name[n-6:] == "weight" && (bytes.Contains([]byte(name), []byte("ln"))) {
		base = 1
	}
	for i := range dst {
		r := rand.New(rand.NewPCG(h.Sum64(), uint64(offset+i)))
		dst[i] = float32(base + 0.2*r.NormFloat64())
	}
	return nil
}

// gpt2Checkpoint saves gpt2Shape with gpt2Init's values on one rank and
// returns the checkpoint root and the values.
func gpt2Checkpoint(t *testing.T) (string, map[string][]float32) {
	t.Helper()
	vals := map[string][]float32{}
	for _, p := range gpt2Shape.Params() {
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		vals[p.Name] = make([]float32, n)
		require.NoError(t, gpt2Init(p.Name, 0, vals[p.Name]))
	}
	root := t.TempDir()
	ctx := context.Background()
	comm := inproc.Communicators(1)[0]
	defer comm.Close()
	o, err := optimizer.New(ctx, comm, cpu.New(1), gpt2Shape.Params(), optimizer.FromMap(vals), optimizer.Config{})
	require.NoError(t, err)
	defer o.Close()
	_, err = checkpoint.Save(ctx, o, comm, root, checkpoint.SaveOptions{})
	require.NoError(t, err)
	return root, vals
}

// TestExportGPT2 exports a checkpoint of examples/gpt's model as GPT-2 and
// checks the names and shapes transformers' GPT2LMHeadModel loads, the
// config.json, and the function: logits of a forward pass written here
// the way transformers computes GPT-2 (Conv1D: y = x W + b, W [in, out];
// q, k, v split from c_attn's output; the head tied to wte) from the
// exported tensors alone equal those of examples/gpt's CPU model from the
// checkpoint's values.
func TestExportGPT2(t *testing.T) {
	root, vals := gpt2Checkpoint(t)
	dir := filepath.Join(t.TempDir(), "gpt2")
	var out, errb bytes.Buffer
	require.Equal(t, 0, runExport([]string{"-as", "gpt2", "-heads", "2", "-dtype", "f32", root, dir}, &out, &errb), errb.String())
	got := map[string]f32Tensor{}
	require.NoError(t, readF32(filepath.Join(dir, "model.safetensors"), got))

	h, f, v, s := gpt2Shape.Hidden, gpt2Shape.FFN, gpt2Shape.Vocab, gpt2Shape.Seq
	want := map[string][]int{"transformer.wte.weight": {v, h}, "transformer.wpe.weight": {s, h}, "transformer.ln_f.weight": {h}, "transformer.ln_f.bias": {h}}
	for l := range gpt2Shape.Layers {
		p := fmt.Sprintf("transformer.h.%d.", l)
		for name, shape := range map[string][]int{"ln_1.weight": {h}, "ln_1.bias": {h}, "attn.c_attn.weight": {h, 3 * h}, "attn.c_attn.bias": {3 * h},
			"attn.c_proj.weight": {h, h}, "attn.c_proj.bias": {h}, "ln_2.weight": {h}, "ln_2.bias": {h},
			"mlp.c_fc.weight": {h, f}, "mlp.c_fc.bias": {f}, "mlp.c_proj.weight": {f, h}, "mlp.c_proj.bias": {h}} {
			want[p+name] = shape
		}
	}
	shapes := map[string][]int{}
	for name, t := range got {
		shapes[name] = t.shape
	}
	require.Equal(t, want, shapes)
	assert.Equal(t, vals["embed.tokens"], got["transformer.wte.weight"].vals, "wte")

	var cfg map[string]any
	js, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(js, &cfg))
	for k, w := range map[string]any{"model_type": "gpt2", "n_layer": 2.0, "n_head": 2.0, "n_embd": 32.0, "n_inner": 48.0, "n_positions": 16.0,
		"vocab_size": 256.0, "activation_function": "gelu_new", "layer_norm_epsilon": model.LNEps, "tie_word_embeddings": true} {
		assert.Equal(t, w, cfg[k], k)
	}

	m, err := model.NewCPU(gpt2Shape)
	require.NoError(t, err)
	for name, x := range vals {
		m.W[name] = make([]float64, len(x))
		for i, e := range x {
			m.W[name][i] = float64(e)
		}
	}
	tokens := []int32{3, 200, 17, 17, 255, 0, 64, 9, 128, 77, 5}
	a, err := m.Forward(tokens, make([]int32, len(tokens)), 1, len(tokens))
	require.NoError(t, err)
	ref := hfGPT2Logits(got, tokens, gpt2Shape.Heads, gpt2Shape.Layers)
	for pos := range tokens {
		assert.InDeltaSlice(t, a.Logits(0, pos), ref[pos], 1e-9, "position %d", pos)
	}
}

// hfGPT2Logits computes GPT-2's logits of tokens from its tensors, as
// transformers' GPT2LMHeadModel does, in float64.
func hfGPT2Logits(w map[string]f32Tensor, tokens []int32, heads, layers int) [][]float64 {
	get := func(name string) []float64 {
		out := make([]float64, len(w[name].vals))
		for i, e := range w[name].vals {
			out[i] = float64(e)
		}
		return out
	}
	wte, wpe := get("transformer.wte.weight"), get("transformer.wpe.weight")
	h := w["transformer.wte.weight"].shape[1]
	n := len(tokens)
	conv1d := func(x []float64, name string) []float64 { // x [n, in] · W [in, out] + b
		W, b, out := get(name+".weight"), get(name+".bias"), w[name+".bias"].shape[0]
		in := len(W) / out
		y := make([]float64, n*out)
		for r := range n {
			for j := range out {
				acc := b[j]
				for i := range in {
					acc += x[r*in+i] * W[i*out+j]
				}
				y[r*out+j] = acc
			}
		}
		return y
	}
	layerNorm := func(x []float64, name string) []float64 {
		g, b := get(name+".weight"), get(name+".bias")
		y := make([]float64, len(x))
		for r := range n {
			row := x[r*h : (r+1)*h]
			mean, vr := 0.0, 0.0
			for _, e := range row {
				mean += e / float64(h)
			}
			for _, e := range row {
				vr += (e - mean) * (e - mean) / float64(h)
			}
			for i, e := range row {
				y[r*h+i] = (e-mean)/math.Sqrt(vr+1e-5)*g[i] + b[i]
			}
		}
		return y
	}
	x := make([]float64, n*h)
	for r, tok := range tokens {
		for i := range h {
			x[r*h+i] = wte[int(tok)*h+i] + wpe[r*h+i]
		}
	}
	d := h / heads
	for l := range layers {
		p := fmt.Sprintf("transformer.h.%d.", l)
		qkv := conv1d(layerNorm(x, p+"ln_1"), p+"attn.c_attn")
		att := make([]float64, n*h)
		for k := range heads {
			for i := range n {
				scores := make([]float64, i+1)
				top := math.Inf(-1)
				for j := range i + 1 {
					for c := range d {
						scores[j] += qkv[i*3*h+k*d+c] * qkv[j*3*h+h+k*d+c]
					}
					scores[j] /= math.Sqrt(float64(d))
					top = max(top, scores[j])
				}
				sum := 0.0
				for j := range scores {
					scores[j] = math.Exp(scores[j] - top)
					sum += scores[j]
				}
				for j := range scores {
					for c := range d {
						att[i*h+k*d+c] += scores[j] / sum * qkv[j*3*h+2*h+k*d+c]
					}
				}
			}
		}
		x2 := conv1d(att, p+"attn.c_proj")
		for i := range x2 {
			x2[i] += x[i]
		}
		fc := conv1d(layerNorm(x2, p+"ln_2"), p+"mlp.c_fc")
		for i, e := range fc { // gelu_new
			fc[i] = 0.5 * e * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(e+0.044715*e*e*e)))
		}
		x = conv1d(fc, p+"mlp.c_proj")
		for i := range x {
			x[i] += x2[i]
		}
	}
	lnf := layerNorm(x, "transformer.ln_f")
	vocab := len(wte) / h
	logits := make([][]float64, n)
	for r := range n {
		logits[r] = make([]float64, vocab)
		for t := range vocab {
			for i := range h {
				logits[r][t] += lnf[r*h+i] * wte[t*h+i]
			}
		}
	}
	return logits
}

// TestExportGPT2Errors: -as takes gpt2 only and needs -heads that divide
// the hidden size; -dtype fp8 is refused.
func TestExportGPT2Errors(t *testing.T) {
	root, _ := gpt2Checkpoint(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-as", "llama", root, t.TempDir()}, 2, `-as="llama"`},
		{[]string{"-as", "gpt2", root, t.TempDir()}, 2, "-heads is required"},
		{[]string{"-heads", "2", root, t.TempDir()}, 2, "-heads is for -as gpt2"},
		{[]string{"-as", "gpt2", "-heads", "3", root, t.TempDir()}, 1, "does not divide the hidden size 32"},
		{[]string{"-as", "gpt2", "-heads", "2", "-dtype", "fp8", root, t.TempDir()}, 1, "not fp8"},
	} {
		var out, errb bytes.Buffer
		assert.Equal(t, tc.code, runExport(tc.args, &out, &errb), "%q", tc.args)
		assert.Contains(t, errb.String(), tc.want, "%q", tc.args)
	}
}
