// Command hfgpt2ref writes what examples/gpt's model computes with the
// FP32 masters of a checkpoint, for scripts/gpu/hf_gpt2_check.py to
// compare with transformers' GPT-2 loaded from `distopt export -as gpt2`
// of the same checkpoint: the next-token logits of validation windows
// (float64 CPU model, written as float32) and the greedy continuation of
// a prompt, with the margin of each choice over the runner-up.
//
//	go run ./scripts/gpu/hfgpt2ref -weights F32EXPORT -data DATA -heads N -out DIR
//
// F32EXPORT is `distopt export -dtype f32` of the checkpoint (its own
// names); DATA the directory of examples/gpt/prepare. It writes
// DIR/logits.f32 (windows x seq x vocab, little-endian) and DIR/ref.json.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/safetensors"
)

// reference is ref.json.
type reference struct {
	Shape   [3]int    `json:"shape"`   // windows, seq, vocab of logits.f32
	Windows []int     `json:"windows"` // data.Window's k of each
	Inputs  [][]int32 `json:"inputs"`
	Prompt  []int32   `json:"prompt"`
	Greedy  []int32   `json:"greedy"`  // the tokens after the prompt
	Margins []float64 `json:"margins"` // top logit minus the runner-up at each greedy step
	Heads   int       `json:"heads"`
}

func main() {
	weights := flag.String("weights", "", "`dir` of `distopt export -dtype f32` of the checkpoint")
	dataDir := flag.String("data", "", "`dir` of examples/gpt/prepare's tokens")
	heads := flag.Int("heads", 0, "attention heads of the model")
	windows := flag.Int("windows", 4, "validation windows")
	prompt := flag.String("prompt", "// Copyright 2009 The Go Authors. All rights ", "prompt of the greedy continuation (the start of most files of the corpus)")
	n := flag.Int("n", 48, "tokens to continue the prompt with")
	out := flag.String("out", "", "`dir` to write logits.f32 and ref.json into")
	flag.Parse()
	if err := run(*weights, *dataDir, *out, *prompt, *heads, *windows, *n); err != nil {
		fmt.Fprintln(os.Stderr, "hfgpt2ref:", err)
		os.Exit(1)
	}
}

func run(weights, dataDir, out, prompt string, heads, windows, n int) error {
	m, err := load(weights, heads)
	if err != nil {
		return err
	}
	_, valid, err := data.ReadTokens(filepath.Join(dataDir, data.ValidFile))
	if err != nil {
		return err
	}
	ks, err := data.EvalWindows(windows, data.ValidWindows(valid, m.Seq), true)
	if err != nil {
		return err
	}
	ref := reference{Shape: [3]int{windows, m.Seq, m.Vocab}, Windows: ks, Heads: heads}
	in, tg := make([]int32, windows*m.Seq), make([]int32, windows*m.Seq)
	for i, k := range ks {
		data.Window(in[i*m.Seq:(i+1)*m.Seq], tg[i*m.Seq:(i+1)*m.Seq], valid, m.Seq, k)
		ref.Inputs = append(ref.Inputs, slices.Clone(in[i*m.Seq:(i+1)*m.Seq]))
	}
	a, err := m.Forward(in, tg, windows, m.Seq)
	if err != nil {
		return err
	}
	var logits []byte
	for b := range windows {
		for t := range m.Seq {
			for _, v := range a.Logits(b, t) {
				logits = binary.LittleEndian.AppendUint32(logits, math.Float32bits(float32(v)))
			}
		}
	}
	for _, c := range data.Encode([]byte(prompt)) {
		ref.Prompt = append(ref.Prompt, int32(c))
	}
	if ref.Greedy, ref.Margins, err = greedy(m, ref.Prompt, n); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "logits.f32"), logits, 0o644); err != nil {
		return err
	}
	js, err := json.Marshal(ref)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "ref.json"), js, 0o644)
}

// greedy continues ctx by n tokens, each the argmax of the last position's
// logits over the last Seq tokens, and returns them with their margins.
func greedy(m *model.CPU, ctx []int32, n int) (toks []int32, margins []float64, err error) {
	ctx = slices.Clone(ctx)
	for range n {
		win := ctx[max(0, len(ctx)-m.Seq):]
		a, err := m.Forward(win, make([]int32, len(win)), 1, len(win))
		if err != nil {
			return nil, nil, err
		}
		l := a.LastLogits()
		best := 0
		for i, v := range l {
			if v > l[best] {
				best = i
			}
		}
		second := math.Inf(-1)
		for i, v := range l {
			if i != best {
				second = max(second, v)
			}
		}
		toks, margins = append(toks, int32(best)), append(margins, l[best]-second)
		ctx = append(ctx, int32(best))
	}
	return toks, margins, nil
}

// load reads the f32 export at dir into examples/gpt's CPU model, its
// shape from the tensors' shapes.
func load(dir string, heads int) (*model.CPU, error) {
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	js, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(js, &index); err != nil {
		return nil, err
	}
	w, shapes := map[string][]float64{}, map[string][]int{}
	files := map[string]bool{}
	for _, f := range index.WeightMap {
		files[f] = true
	}
	for f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		h, _, err := safetensors.Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return nil, err
		}
		for _, t := range h.Tensors {
			if t.DType != safetensors.F32 {
				return nil, fmt.Errorf("%s: %s is %v: export with -dtype f32", f, t.Name, t.DType)
			}
			raw := b[h.DataOffset+t.Begin : h.DataOffset+t.End]
			v := make([]float64, len(raw)/4)
			for i := range v {
				v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
			}
			w[t.Name], shapes[t.Name] = v, t.Shape
		}
	}
	c := model.Config{Heads: heads, Vocab: shapes["embed.tokens"][0], Hidden: shapes["embed.tokens"][1], Seq: shapes["embed.positions"][0], FFN: shapes["layer0.mlp.fc.weight"][0]}
	for shapes[fmt.Sprintf("layer%d.ln1.weight", c.Layers)] != nil {
		c.Layers++
	}
	m, err := model.NewCPU(c)
	if err != nil {
		return nil, err
	}
	for _, p := range c.Params() {
		if w[p.Name] == nil {
			return nil, fmt.Errorf("%s lacks %s", dir, p.Name)
		}
		m.W[p.Name] = w[p.Name]
	}
	return m, nil
}
