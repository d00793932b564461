package gomlxinterop_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/distopt/distopt/optimizer"
)

// gradRun is one run of a weight gradient graph: its loss and gradient
// bytes, and how many fresh decodes and early roundings it made.
type gradRun struct {
	loss           float32
	grads          [][]byte
	redecoded, bf  int64
	productWeights int // FP8 weights of the toy transformer read by a product
}

// runWeightGrad builds the toy transformer's weight gradient graph with
// UseDotGeneralGradient, gradient type gt and GPUConfig's keep (decoded
// weights) and early (BF16 gradients) choices, and runs it once.
func runWeightGrad(t *testing.T, gt buffer.DType, keep, early bool) gradRun {
	t.Helper()
	defer gomlxinterop.UseDotGeneralGradient()()
	task, b, be, tr := tinyTrainer(t, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}, gt)
	defer tr.Close()
	views, ws := weightTensors(t, tr.Optimizer(), tr.Params())
	var r gradRun
	for _, v := range views {
		// the two embeddings are read by a gather and an add, whose
		// gradients do not read them
		if !v.HighPrecision && !strings.HasSuffix(v.Name, "embeddings") {
			r.productWeights++
		}
	}
	e, err := gomlxinterop.NewWeightGradExecWith(be, tr.GradExec().Context(), task.Model(), task.Loss, tr.Params(), views, gt, keep, early)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	dec, bf := gomlxinterop.Redecoded(), gomlxinterop.EarlyGrads()
	loss, gs, err := e.Exec(b.Inputs, b.Labels, ws)
	if err != nil {
		t.Fatal(err)
	}
	r.redecoded, r.bf = gomlxinterop.Redecoded()-dec, gomlxinterop.EarlyGrads()-bf
	r.loss = tensors.ToScalar[float32](loss)
	for _, g := range gs {
		r.grads = append(r.grads, tensorBytes(t, g))
	}
	return r
}

// same checks that run got has want's loss and gradient bits.
func (got gradRun) same(t *testing.T, name string, want gradRun) {
	t.Helper()
	if math.Float32bits(got.loss) != math.Float32bits(want.loss) {
		t.Errorf("%s: loss %g, want %g", name, got.loss, want.loss)
	}
	for i := range want.grads {
		if !bytes.Equal(got.grads[i], want.grads[i]) {
			t.Errorf("%s: the bytes of gradient %d differ", name, i)
		}
	}
}

// TestRedecode checks that, with UseDotGeneralGradient, the weight
// gradient graph decodes every FP8 weight that a matrix product reads a
// second time for backward (one fresh decode per FP8 parameter of the toy
// transformer but its two embeddings) and that this changes no bit of the
// loss or the gradients against the graph that keeps the decoded weights
// (GPUConfig.KeepDecoded), which makes no fresh decode.
func TestRedecode(t *testing.T) {
	again, keep := runWeightGrad(t, buffer.Float32, false, false), runWeightGrad(t, buffer.Float32, true, false)
	if again.productWeights == 0 {
		t.Fatal("the toy transformer has no FP8 weight read by a matrix product")
	}
	if again.redecoded != int64(again.productWeights) || keep.redecoded != 0 {
		t.Errorf("%d fresh decodes decoding again and %d keeping the decoded weights, want %d and 0", again.redecoded, keep.redecoded, again.productWeights)
	}
	again.same(t, "decoding again", keep)
}

// TestEarlyBF16Gradients checks GPUConfig.EarlyBF16Gradients: with BF16
// gradients, every FP8 weight that one product reads has its gradient
// rounded in backward (one per such weight of the toy transformer), and
// the loss and gradients are the bits of rounding at the end, with the
// decoded weights kept or decoded again; with FP32 gradients nothing is
// rounded early.
func TestEarlyBF16Gradients(t *testing.T) {
	early, late, kept := runWeightGrad(t, buffer.BFloat16, false, true), runWeightGrad(t, buffer.BFloat16, false, false), runWeightGrad(t, buffer.BFloat16, true, false)
	if early.bf != int64(early.productWeights) || late.bf != 0 {
		t.Errorf("%d gradients rounded early, %d without the option; want %d and 0", early.bf, late.bf, early.productWeights)
	}
	early.same(t, "rounded early against at the end", late)
	early.same(t, "rounded early against the decoded weights kept", kept)
	if f32 := runWeightGrad(t, buffer.Float32, false, true); f32.bf != 0 {
		t.Errorf("FP32 gradients: %d rounded early, want 0", f32.bf)
	}
}

// TestEarlyBF16NeedsBF16 checks that GPUConfig.EarlyBF16Gradients with
// FP32 gradients is refused (optimizer.ErrConfig): there is nothing to
// round, and the option would silently do nothing.
func TestEarlyBF16NeedsBF16(t *testing.T) {
	defer gomlxinterop.UseDotGeneralGradient()()
	task := toy.Tiny
	x, y := task.Batch(1, 0, perRank)
	cfg := adamConfig().Optimizer
	cfg.GradType = buffer.Float32
	_, err := gomlxinterop.NewHostGPUPath(context.Background(), inproc.Communicators(1)[0], newBackend(t), toy.Context(seed), task.Model(), task.Loss,
		gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}, gomlxinterop.GPUConfig{Optimizer: cfg, EarlyBF16Gradients: true})
	if !errors.Is(err, optimizer.ErrConfig) || !strings.Contains(err.Error(), "needs BF16 gradients") {
		t.Errorf("EarlyBF16Gradients with FP32 gradients: %v, want ErrConfig naming BF16 gradients", err)
	}
}
