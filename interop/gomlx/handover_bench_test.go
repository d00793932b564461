package gomlxinterop_test

import (
	"context"
	"testing"

	"github.com/distopt/distopt/collective/inproc"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// benchShape is a wider MLP than the tests' (256 -> 512 -> 512 -> 16,
// 402,448 parameters), batch 64.
var benchShape = toy.Shape{In: 256, Hidden: 512, Layers: 2, Out: 16}

const benchBatch = 64

func benchTrainer(b *testing.B, layout gomlxinterop.Layout) (*gomlxinterop.Trainer, gomlxinterop.Batch) {
	b.Helper()
	be := newBackend(b)
	data := toy.NewData(benchShape, 1)
	x, y := data.Batch(0, 0, benchBatch)
	batch := gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
	cfg := adamConfig()
	cfg.Rules.Layout = func(v *mlctx.Variable) gomlxinterop.Layout {
		if v.Shape().Rank() < 2 {
			return gomlxinterop.AsIs
		}
		return layout
	}
	tr, err := gomlxinterop.NewTrainer(context.Background(), inproc.Communicators(1)[0], be, toy.Context(seed), benchShape.Model(), toy.Loss, batch, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	return tr, batch
}

// BenchmarkForwardBackward is the model's own work per step: GoMLX's
// forward and backward pass on simplego (loss and gradients).
func BenchmarkForwardBackward(b *testing.B) {
	tr, batch := benchTrainer(b, gomlxinterop.Transposed)
	b.ReportAllocs()
	for b.Loop() {
		l, grads, err := tr.GradExec().Exec(batch.Inputs, batch.Labels)
		if err != nil {
			b.Fatal(err)
		}
		l.FinalizeAll()
		for _, g := range grads {
			g.FinalizeAll()
		}
	}
}

// BenchmarkHandOver is the adapter's work per step, in both directions:
// gradients into distopt's BF16 gradient views, and the gathered FP8
// weights dequantized into the GoMLX variables, per layout.
func BenchmarkHandOver(b *testing.B) {
	for _, layout := range []gomlxinterop.Layout{gomlxinterop.AsIs, gomlxinterop.Transposed} {
		tr, batch := benchTrainer(b, layout)
		_, grads, err := tr.GradExec().Exec(batch.Inputs, batch.Labels)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("grads/"+layout.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := tr.HandOver().Grads(grads); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("weights/"+layout.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := tr.HandOver().Weights(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStep is distopt's own step on one rank (reduce, AdamW, cast,
// gather on the CPU backend), for scale.
func BenchmarkStep(b *testing.B) {
	tr, batch := benchTrainer(b, gomlxinterop.Transposed)
	_, grads, err := tr.GradExec().Exec(batch.Inputs, batch.Labels)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.HandOver().Grads(grads); err != nil {
			b.Fatal(err)
		}
		if _, err := tr.Optimizer().Step(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandOverNaive is the hand-over written with the optimizer's
// allocating calls (SetGrad of a copied gradient, Weights, then a copy into
// the variable), as-is layout, beside BenchmarkHandOver.
func BenchmarkHandOverNaive(b *testing.B) {
	tr, batch := benchTrainer(b, gomlxinterop.AsIs)
	_, grads, err := tr.GradExec().Exec(batch.Inputs, batch.Labels)
	if err != nil {
		b.Fatal(err)
	}
	o := tr.Optimizer()
	b.ReportAllocs()
	for b.Loop() {
		for i, p := range tr.Params() {
			if err := o.SetGrad(p.Name, tensors.MustCopyFlatData[float32](grads[i])); err != nil {
				b.Fatal(err)
			}
			w, err := o.Weights(p.Name)
			if err != nil {
				b.Fatal(err)
			}
			tensors.MustMutableFlatData(p.Var.MustValue(), func(flat []float32) { copy(flat, w) })
		}
	}
}
