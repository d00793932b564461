package gpumodel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
)

// TestIsLinearWeight checks, without a GPU, which gradients BackwardInto
// leaves to the GEMMs to write: the four linear layers' weights of every
// block, and no bias, LayerNorm or embedding.
func TestIsLinearWeight(t *testing.T) {
	n := 0
	for _, p := range testShape.Params() {
		want := strings.HasSuffix(p.Name, ".weight") && !strings.Contains(p.Name, "ln") && strings.HasPrefix(p.Name, "layer")
		if got := isLinearWeight(p.Name); got != want {
			t.Errorf("isLinearWeight(%q) = %v", p.Name, got)
		}
		if want {
			n++
		}
	}
	if n != nLinear*testShape.Layers {
		t.Errorf("%d linear weights, want %d", n, nLinear*testShape.Layers)
	}
}

// TestGPUBackwardInto runs two micro-batches with ZeroGrads and Backward,
// then with BackwardInto for the first over gradient views filled with
// NaN bytes: every gradient must come out equal (as numbers: an exactly
// zero sum may differ in its sign) and no NaN left, so every element is
// written; the losses and logits are the same bits. Per-tensor, 128x128
// and MXFP8 weights (the tensor cores, and gemm's dequantizing
// fallback), float32 and bfloat16 gradient views.
func TestGPUBackwardInto(t *testing.T) {
	for _, rc := range []int{0, 2, 4} {
		for _, gt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
			t.Run(fmt.Sprintf("%s/%v", recipes[rc].name, gt), func(t *testing.T) { backwardInto(t, recipes[rc].r, gt) })
		}
	}
}

// backwardInto is TestGPUBackwardInto for weights of recipe rc and
// gradient views of type gt.
func backwardInto(t *testing.T, rc fp8.Recipe, gt buffer.DType) {
	r := newRig(t, testShape, 1e-3, rc)
	grads, read := gradViews(t, r, gt)
	o := Options{GradType: gt}
	// run fills the views with NaN bytes and runs two micro-batches on a
	// new model, the first by ZeroGrads and Backward or by BackwardInto;
	// it returns the losses and logits bytes and each gradient's values.
	run := func(into bool) (losses, logits []byte, g map[string][]float32) {
		m := r.model(t, testShape, 2, 32, o)
		for _, p := range testShape.Params() {
			v, err := grads(p.Name)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.s.Memset8(cuda.DevicePtr(v.Data.(buffer.DeviceBuffer).Ptr), 0xff, v.Data.Len()); err != nil { // NaN in float32 and bfloat16
				t.Fatal(err)
			}
		}
		if !into {
			if err := m.ZeroGrads(grads); err != nil {
				t.Fatal(err)
			}
		}
		for mb := range uint64(2) {
			tokens, targets := randomTokens(m.rows, m.cfg.Vocab, 10+mb), randomTokens(m.rows, m.cfg.Vocab, 20+mb)
			if err := m.Forward(r.o.Param, tokens, targets, 0.5); err != nil {
				t.Fatal(err)
			}
			backward := m.Backward
			if into && mb == 0 {
				backward = m.BackwardInto
			}
			if err := backward(r.o.Param, grads, nil); err != nil {
				t.Fatal(err)
			}
		}
		losses, logits = make([]byte, 4*m.rows), make([]byte, 4*m.rows*m.cfg.Vocab)
		if err := errors.Join(m.s.Download(losses, m.losses), m.s.Download(logits, m.logits)); err != nil {
			t.Fatal(err)
		}
		g = map[string][]float32{}
		for _, p := range testShape.Params() {
			g[p.Name] = read(p.Name)
		}
		return losses, logits, g
	}
	l0, g0, want := run(false)
	l1, g1, got := run(true)
	if !bytes.Equal(l0, l1) || !bytes.Equal(g0, g1) {
		t.Errorf("losses or logits differ with BackwardInto")
	}
	for _, p := range testShape.Params() {
		a, b := want[p.Name], got[p.Name]
		for i := range a {
			if math.IsNaN(float64(b[i])) || a[i] != b[i] {
				t.Errorf("%s[%d]: %v with BackwardInto, %v with ZeroGrads and Backward", p.Name, i, b[i], a[i])
				break
			}
		}
	}
}

// gradViews returns gradient views of type gt for the rig's model (the
// optimizer's float32 ones, or bfloat16 ones of bf16Views) and a reader
// of each one's values.
func gradViews(t *testing.T, r *rig, gt buffer.DType) (Grads, func(name string) []float32) {
	if gt == buffer.BFloat16 {
		grads, read16 := bf16Views(t, r, testShape)
		return grads, func(name string) []float32 {
			h := read16(name)
			v := make([]float32, len(h))
			for i, b := range h {
				v[i] = bf16.ToFloat32(b)
			}
			return v
		}
	}
	all := r.grads
	return r.o.Grad, func(name string) []float32 {
		raw := all(t, testShape)[name]
		v := make([]float32, len(raw)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return v
	}
}
