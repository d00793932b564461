package gpumodel

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
)

// TestDelayedActivationsOptions checks, without a GPU, that
// Options.DelayedActivations is refused off the fused forward and when
// negative, naming it, and that PredictMemory counts its histories and
// scales: 4 x 3 x layers x (history + 3) bytes more, in Final.
func TestDelayedActivationsOptions(t *testing.T) {
	for _, o := range []Options{{DelayedActivations: 4, Unfused: true}, {DelayedActivations: 4, Recompute: true}, {DelayedActivations: -1}} {
		if _, err := NewWith(nil, nil, testShape, 2, 32, o); err == nil || !strings.Contains(err.Error(), "DelayedActivations") {
			t.Errorf("NewWith %+v: %v, want an error naming DelayedActivations", o, err)
		}
	}
	cfg, err := model.Preset("1.3b")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}}
	want, err := PredictMemory(cfg, 4, cfg.Seq, o)
	if err != nil {
		t.Fatal(err)
	}
	o.DelayedActivations = 1024
	got, err := PredictMemory(cfg, 4, cfg.Seq, o)
	if err != nil {
		t.Fatal(err)
	}
	want.Final += 4 * 3 * cfg.Layers * (1024 + 3)
	if got != want {
		t.Errorf("with DelayedActivations %+v, want %+v", got, want)
	}
}

// sameBatchTwice runs two training passes (forward and backward, the
// gradients zeroed before each) on the same tokens and weights, calling
// between after the first, and returns the second's losses, logits,
// gradients and kept FP8 inputs.
func sameBatchTwice(t *testing.T, r *rig, m *Model, between func()) run {
	t.Helper()
	tokens, targets := randomTokens(m.rows, m.cfg.Vocab, 10), randomTokens(m.rows, m.cfg.Vocab, 20)
	for pass := range 2 {
		trainPass(t, r, m, tokens, targets)
		if pass == 0 && between != nil {
			between()
		}
	}
	return collect(t, r, m)
}

// collect returns m's losses, logits, gradients and kept FP8 inputs.
func collect(t *testing.T, r *rig, m *Model) run {
	t.Helper()
	out := run{losses: make([]byte, 4*m.rows), logits: make([]byte, 4*m.rows*m.cfg.Vocab), grads: r.grads(t, m.cfg), kept: keptInputs(t, m)}
	if err := m.s.Download(out.losses, m.losses); err != nil {
		t.Fatal(err)
	}
	if err := m.s.Download(out.logits, m.logits); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGPUDelayedActivations checks delayed scaling of the activations
// (Options.DelayedActivations) on the fused forward, for per-tensor
// current and delayed weights, with and without the epilogue (GELU's two
// kernels):
//
//   - two training passes on the same tokens and weights: the first
//     scales from its own amaxes, the second from the first's, which are
//     its own again; so its losses, logits, gradients and kept FP8 inputs
//     must be current scaling's, bit for bit, although an evaluation
//     forward on other tokens ran between them (it must fold its amaxes
//     where training does not read them);
//   - then, with the amaxes the second pass folded multiplied by 4, a
//     third and a fourth pass on the same tokens must keep the inputs of
//     attn.qkv, mlp.fc and mlp.proj with scale_inv 4 times current
//     scaling's (the history's largest amax sets the scale); an
//     evaluation between them must not touch the training amaxes.
//     (attn.proj's input is scaled by gemm from its own amax, which the
//     coarser codes upstream may change.)
func TestGPUDelayedActivations(t *testing.T) {
	for _, rc := range recipes[:2] {
		for _, epilogue := range []bool{false, true} {
			r := newRig(t, testShape, 1e-3, rc.r)
			want := sameBatchTwice(t, r, r.model(t, testShape, 2, 32, Options{Epilogue: epilogue}), nil)
			m := r.model(t, testShape, 2, 32, Options{Epilogue: epilogue, DelayedActivations: 4})
			got := sameBatchTwice(t, r, m, func() {
				other := randomTokens(m.rows, m.cfg.Vocab, 30)
				if err := m.Forward(r.o.Param, other, other, 0); err != nil {
					t.Fatal(err)
				}
			})
			name := rc.name
			if epilogue {
				name += " epilogue"
			}
			sameRun(t, name, got, want)
			quadrupleAmax(t, m)
			// passes 3 and 4 (the fourth's history holds 4 x the amax too),
			// an evaluation with the rolled scales between them, which must
			// leave the training amaxes as they were
			third := sameBatchTwice(t, r, m, func() {
				before := amaxWords(t, m)
				other := randomTokens(m.rows, m.cfg.Vocab, 31)
				if err := m.Forward(r.o.Param, other, other, 0); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(amaxWords(t, m), before) {
					t.Errorf("%s: an evaluation changed the training amaxes", name)
				}
			})
			for key, w := range want.kept {
				if strings.HasSuffix(key, linearNames[projL]) {
					continue // gemm's current scaling of a stream the coarser codes changed
				}
				g := third.kept[key]
				gi, wi := math.Float32frombits(leU32(g[len(g)-4:])), math.Float32frombits(leU32(w[len(w)-4:]))
				if gi != 4*wi {
					t.Errorf("%s: %s input kept with scale_inv %g, want 4 x %g", name, key, gi, wi)
				}
			}
		}
	}
}

// sameRun reports every loss, logit, gradient or kept input byte of got
// that differs from want's.
func sameRun(t *testing.T, name string, got, want run) {
	t.Helper()
	if !bytes.Equal(got.losses, want.losses) || !bytes.Equal(got.logits, want.logits) {
		t.Errorf("%s: losses or logits differ from current scaling's", name)
	}
	for k, w := range want.grads {
		if !bytes.Equal(got.grads[k], w) {
			t.Errorf("%s: gradient of %s differs from current scaling's", name, k)
		}
	}
	for k, w := range want.kept {
		if !bytes.Equal(got.kept[k], w) {
			t.Errorf("%s: kept input of %s differs from current scaling's", name, k)
		}
	}
}

// amaxWords downloads the amax words training forwards fold into.
func amaxWords(t *testing.T, m *Model) []byte {
	t.Helper()
	raw := make([]byte, 4*len(actSlot)*m.cfg.Layers)
	if err := m.s.Download(raw, m.act.amax); err != nil {
		t.Fatal(err)
	}
	return raw
}

// quadrupleAmax multiplies by 4 every amax the training forwards folded
// since the last roll of the histories.
func quadrupleAmax(t *testing.T, m *Model) {
	t.Helper()
	raw := amaxWords(t, m)
	keys := cuda.View[uint32](raw)
	for i, k := range keys {
		keys[i] = math.Float32bits(4 * math.Float32frombits(k))
	}
	if err := m.s.Upload(m.act.amax, raw); err != nil {
		t.Fatal(err)
	}
}

// leU32 is the little-endian uint32 of b's first four bytes.
func leU32(b []byte) uint32 { return cuda.View[uint32](b)[0] }

// TestGPUDelayedActivationState checks that a model given another's
// delayed activation state (DelayedActivationState, then
// SetDelayedActivationState, as a checkpoint carries it) scales as that
// model does: after two training passes of the first, four more passes of
// each on new batches (past a wrap of the histories' rings) keep the same
// inputs and give the same losses and gradients, bit for bit; a state of
// another history length, and one whose counts disagree, are refused.
func TestGPUDelayedActivationState(t *testing.T) {
	const l = 3
	r := newRig(t, testShape, 1e-3, recipes[0].r)
	a := r.model(t, testShape, 2, 32, Options{DelayedActivations: l})
	sameBatchTwice(t, r, a, nil)
	state, err := a.DelayedActivationState()
	if err != nil {
		t.Fatal(err)
	}
	b := r.model(t, testShape, 2, 32, Options{DelayedActivations: l})
	if err := b.SetDelayedActivationState(state); err != nil {
		t.Fatal(err)
	}
	other := r.model(t, testShape, 2, 32, Options{DelayedActivations: l + 1})
	if err := other.SetDelayedActivationState(state); err == nil {
		t.Error("a state of history 3 taken by a model of history 4")
	}
	bad := bytes.Clone(state)
	bad[4*8] ^= 1 // the rolls no longer follow the training forwards
	if err := b.SetDelayedActivationState(bad); err == nil {
		t.Error("a state whose counts disagree was taken")
	}
	for pass := range l + 1 {
		tokens, targets := randomTokens(a.rows, a.cfg.Vocab, uint64(40+pass)), randomTokens(a.rows, a.cfg.Vocab, uint64(50+pass))
		runs := make([]run, 2)
		for i, m := range []*Model{a, b} {
			trainPass(t, r, m, tokens, targets)
			runs[i] = collect(t, r, m)
		}
		sameRun(t, fmt.Sprintf("restored state, pass %d", pass), runs[1], runs[0])
	}
}
