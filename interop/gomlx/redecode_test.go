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

// TestRedecode checks that, with UseDotGeneralGradient, the weight
// gradient graph decodes every FP8 weight that a matrix product reads a
// second time for backward (one fresh decode per FP8 parameter of the toy
// transformer but its two embeddings, read by a gather and an add, whose
// gradients do not read them) and that this changes no bit of the loss or
// the gradients against the graph that keeps the decoded weights
// (GPUConfig.KeepDecoded), which makes no fresh decode.
func TestRedecode(t *testing.T) {
	defer gomlxinterop.UseDotGeneralGradient()()
	task, b, be, tr := tinyTrainer(t, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}, buffer.Float32)
	defer tr.Close()
	views, ws := weightTensors(t, tr.Optimizer(), tr.Params())
	fp8Params := 0
	for _, v := range views {
		if !v.HighPrecision && !strings.HasSuffix(v.Name, "embeddings") {
			fp8Params++
		}
	}
	if fp8Params == 0 {
		t.Fatal("the toy transformer has no FP8 weight read by a matrix product")
	}
	var losses [2]float32
	var grads [2][][]byte
	for i, keep := range []bool{false, true} {
		e, err := gomlxinterop.NewWeightGradExecKeepDecoded(be, tr.GradExec().Context(), task.Model(), task.Loss, tr.Params(), views, buffer.Float32, keep)
		if err != nil {
			t.Fatal(err)
		}
		before := gomlxinterop.Redecoded()
		loss, gs, err := e.Exec(b.Inputs, b.Labels, ws)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(fp8Params)
		if keep {
			want = 0
		}
		if got := gomlxinterop.Redecoded() - before; got != want {
			t.Errorf("keep decoded %v: %d fresh decodes, want %d (one per FP8 weight a product reads)", keep, got, want)
		}
		losses[i] = tensors.ToScalar[float32](loss)
		for _, g := range gs {
			grads[i] = append(grads[i], tensorBytes(t, g))
		}
		e.Finalize()
	}
	if math.Float32bits(losses[0]) != math.Float32bits(losses[1]) {
		t.Errorf("loss %g decoding again, %g keeping the decoded weights", losses[0], losses[1])
	}
	for i, p := range tr.Params() {
		if !bytes.Equal(grads[0][i], grads[1][i]) {
			t.Errorf("%s: gradient bytes differ between decoding again and keeping the decoded weights", p.Name)
		}
	}
}
