package gomlxinterop_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
)

// gradRun is one run of a weight gradient graph: its loss and gradient
// bytes, and how many fresh decodes it made.
type gradRun struct {
	loss           float32
	grads          [][]byte
	redecoded      int64
	productWeights int // FP8 weights of the toy transformer read by a product
}

// runWeightGrad builds the toy transformer's weight gradient graph with
// UseDotGeneralGradient, gradient type gt and GPUConfig's keep (decoded
// weights) choice, and runs it once.
func runWeightGrad(t *testing.T, gt buffer.DType, keep bool) gradRun {
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
	e, err := gomlxinterop.NewWeightGradExecWith(be, tr.GradExec().Context(), task.Model(), task.Loss, tr.Params(), views, gt, keep)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	dec := gomlxinterop.Redecoded()
	loss, gs, err := e.Exec(b.Inputs, b.Labels, ws)
	if err != nil {
		t.Fatal(err)
	}
	r.redecoded = gomlxinterop.Redecoded() - dec
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
	again, keep := runWeightGrad(t, buffer.Float32, false), runWeightGrad(t, buffer.Float32, true)
	if again.productWeights == 0 {
		t.Fatal("the toy transformer has no FP8 weight read by a matrix product")
	}
	if again.redecoded != int64(again.productWeights) || keep.redecoded != 0 {
		t.Errorf("%d fresh decodes decoding again and %d keeping the decoded weights, want %d and 0", again.redecoded, keep.redecoded, again.productWeights)
	}
	again.same(t, "decoding again", keep)
}
