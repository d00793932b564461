package gomlxinterop_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/distopt/distopt/optimizer"
)

// weightTensors returns the weight inputs of a WeightGradExec for opt's
// gathered parameters, as host tensors (codes and scale_inv, or the
// high-precision copy).
func weightTensors(t *testing.T, opt *optimizer.Optimizer, params []gomlxinterop.Param) ([]optimizer.ParamView, []*tensors.Tensor) {
	t.Helper()
	var views []optimizer.ParamView
	var ws []*tensors.Tensor
	for _, p := range params {
		v, err := opt.Param(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
		data := []byte(v.Data.(buffer.HostBuffer))
		switch {
		case v.HighPrecision && v.DType == buffer.BFloat16:
			h := make([]bfloat16.BFloat16, len(data)/2)
			for i := range h {
				h[i] = bfloat16.BFloat16(binary.LittleEndian.Uint16(data[2*i:]))
			}
			ws = append(ws, tensors.FromFlatDataAndDimensions(h, v.Shape...))
		case v.HighPrecision:
			ws = append(ws, tensors.FromFlatDataAndDimensions(floats(data), v.Shape...))
		default:
			ws = append(ws, tensors.FromFlatDataAndDimensions(bytes.Clone(data), v.Shape...))
			inv := []byte(v.ScaleInv.(buffer.HostBuffer))
			if v.Recipe.Scaling == fp8.MXFP8 {
				ws = append(ws, tensors.FromFlatDataAndDimensions(bytes.Clone(inv), len(inv)))
			} else {
				ws = append(ws, tensors.FromFlatDataAndDimensions(floats(inv), len(inv)/4))
			}
		}
	}
	return views, ws
}

func floats(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

// TestWeightGradExec checks the graph of the GPU path on the CPU: fed the
// FP8 codes and scale_inv that distopt gathered, it returns the loss and
// the gradients, in distopt's layout and gradient type, bit for bit as the
// CPU path computes them (the variables holding the decoded weights, the
// gradients transposed by HandOver) — for per-tensor, 1x128, 128x128 and
// MXFP8 scaling, and per-tensor again with both graphs differentiated by
// UseDotGeneralGradient (as the example builds them). FP32 gradients only:
// simplego converts to bfloat16 by truncation, HandOver (and XLA) round to
// nearest even.
func TestWeightGradExec(t *testing.T) {
	for _, c := range []struct {
		name    string
		r       fp8.Recipe
		gt      buffer.DType
		dotGrad bool
	}{
		{"current", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.Float32, false},
		{"1x128 fp32", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, buffer.Float32, false},
		{"128x128 e5m2", fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.Block128x128}, buffer.Float32, false},
		{"mxfp8", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.MXFP8}, buffer.Float32, false},
		{"current, UseDotGeneralGradient", fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.Float32, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.dotGrad {
				defer gomlxinterop.UseDotGeneralGradient()()
			}
			task, b, be, tr := tinyTrainer(t, c.r, c.gt)
			defer tr.Close()
			opt := tr.Optimizer()
			views, ws := weightTensors(t, opt, tr.Params())
			wexec, err := gomlxinterop.NewWeightGradExec(be, tr.GradExec().Context(), task.Model(), task.Loss, tr.Params(), views, c.gt)
			if err != nil {
				t.Fatal(err)
			}
			defer wexec.Finalize()
			checkDecoded(t, be, wexec, opt, tr.Params(), ws)
			loss, grads, err := wexec.Exec(b.Inputs, b.Labels, ws)
			if err != nil {
				t.Fatal(err)
			}
			refLoss, refGrads, err := tr.GradExec().Exec(b.Inputs, b.Labels)
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.HandOver().Grads(refGrads); err != nil {
				t.Fatal(err)
			}
			if got, want := tensors.ToScalar[float32](loss), tensors.ToScalar[float32](refLoss); math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("loss %g, the CPU path's %g", got, want)
			}
			for i, p := range tr.Params() {
				v, err := opt.Grad(p.Name)
				if err != nil {
					t.Fatal(err)
				}
				want := []byte(v.Data.(buffer.HostBuffer))
				got := tensorBytes(t, grads[i])
				if !bytes.Equal(got, want) {
					t.Errorf("%s (%v): gradient bytes differ from the CPU hand-over's (%d bytes, want %d)", p.Name, p.Layout, len(got), len(want))
				}
			}
		})
	}
}

// tinyTrainer returns the toy transformer, its first batch, a simplego
// backend and a one-rank CPU Trainer of it with recipe r and gradient type
// gt; the caller closes the Trainer.
func tinyTrainer(t *testing.T, r fp8.Recipe, gt buffer.DType) (toy.Transformer, gomlxinterop.Batch, backends.Backend, *gomlxinterop.Trainer) {
	t.Helper()
	cfg := adamConfig()
	cfg.Optimizer.Recipe, cfg.Optimizer.GradType = r, gt
	task := toy.Tiny
	x, y := task.Batch(1, 0, perRank)
	b := gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
	be := newBackend(t)
	tr, err := gomlxinterop.NewTrainer(context.Background(), inproc.Communicators(1)[0], be, toy.Context(seed), task.Model(), task.Loss, b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return task, b, be, tr
}

// tensorBytes returns the little-endian bytes of a float32 or bfloat16
// tensor.
func tensorBytes(t *testing.T, x *tensors.Tensor) []byte {
	t.Helper()
	switch x.DType() {
	case dtypes.Float32:
		f := tensors.MustCopyFlatData[float32](x)
		out := make([]byte, 4*len(f))
		for i, v := range f {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
		return out
	case dtypes.BFloat16:
		h := tensors.MustCopyFlatData[bfloat16.BFloat16](x)
		out := make([]byte, 2*len(h))
		for i, v := range h {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(v))
		}
		return out
	}
	t.Fatalf("gradient of dtype %s", x.DType())
	return nil
}

// checkDecoded checks that DecodeWeights on backend returns, bit for bit,
// what opt.WeightsInto (or WeightsIntoTransposed) writes for each
// parameter: fp8.Decode x scale_inv, in the variable's layout.
func checkDecoded(t *testing.T, be backends.Backend, wexec *gomlxinterop.WeightGradExec, opt *optimizer.Optimizer, params []gomlxinterop.Param, ws []*tensors.Tensor) {
	t.Helper()
	dec, err := wexec.DecodeWeights(be, ws)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range params {
		got := tensors.MustCopyFlatData[float32](dec[i])
		dec[i].FinalizeAll()
		want := make([]float32, len(got))
		if p.Layout == gomlxinterop.Transposed {
			err = opt.WeightsIntoTransposed(want, p.Name)
		} else {
			err = opt.WeightsInto(want, p.Name)
		}
		if err != nil {
			t.Fatal(err)
		}
		for k := range want {
			if !sameBits(got[k], want[k]) {
				t.Errorf("%s: decoded weight %d is %g, WeightsInto %g", p.Name, k, got[k], want[k])
				break
			}
		}
	}
}

// TestWeightGradExecErrors checks the refusals: views that are not the
// parameters', a wrong number of weight tensors, and a model that uses a
// trainable variable that is not a parameter (ErrGraph).
func TestWeightGradExecErrors(t *testing.T) {
	ctx := context.Background()
	task := toy.Tiny
	x, y := task.Batch(1, 0, perRank)
	b := gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
	be := newBackend(t)
	tr, err := gomlxinterop.NewTrainer(ctx, inproc.Communicators(1)[0], be, toy.Context(seed), task.Model(), task.Loss, b, adamConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	views, ws := weightTensors(t, tr.Optimizer(), tr.Params())
	gctx, ps := tr.GradExec().Context(), tr.Params()
	if _, err := gomlxinterop.NewWeightGradExec(be, gctx, task.Model(), task.Loss, ps, views[1:], buffer.BFloat16); !errors.Is(err, gomlxinterop.ErrHandOver) {
		t.Errorf("one view missing: %v, want ErrHandOver", err)
	}
	e, err := gomlxinterop.NewWeightGradExec(be, gctx, task.Model(), task.Loss, ps, views, buffer.BFloat16)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	if _, _, err := e.Exec(b.Inputs, b.Labels, ws[1:]); !errors.Is(err, gomlxinterop.ErrHandOver) {
		t.Errorf("a weight tensor missing: %v, want ErrHandOver", err)
	}
	last := len(ps) - 1
	short, err := gomlxinterop.NewWeightGradExec(be, gctx, task.Model(), task.Loss, ps[:last], views[:last], buffer.BFloat16)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Finalize()
	n := len(ws) - 1
	if !views[last].HighPrecision {
		n--
	}
	if _, _, err := short.Exec(b.Inputs, b.Labels, ws[:n]); !errors.Is(err, gomlxinterop.ErrGraph) {
		t.Errorf("a trainable variable left out: %v, want ErrGraph", err)
	}
}
