package gomlxinterop_test

import (
	"bytes"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// TestBucketGradients checks the graph GPUTrainer builds to lend its
// gradients: each bucket output holds, at every parameter's place in
// distopt's layout, the bytes of that parameter's gradient from the
// per-parameter graph (NewWeightGradExec, run on the same weights and
// batch), and zeros everywhere else; the loss is the same.
func TestBucketGradients(t *testing.T) {
	for _, gt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
		t.Run(gt.String(), func(t *testing.T) {
			task, b, be, tr := tinyTrainer(t, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, gt)
			defer tr.Close()
			views, ws := weightTensors(t, tr.Optimizer(), tr.Params())
			ctx := tr.GradExec().Context()
			per, err := gomlxinterop.NewWeightGradExec(be, ctx, task.Model(), task.Loss, tr.Params(), views, gt)
			if err != nil {
				t.Fatal(err)
			}
			defer per.Finalize()
			// three ranks' layout, with buckets of a few parameters and
			// padding between them
			l, err := optimizer.NewLayout(gomlxinterop.OptimizerParams(tr.Params()), 3, shard.Options{Align: 96, BucketElements: 4096})
			if err != nil {
				t.Fatal(err)
			}
			bucketed, err := gomlxinterop.NewBucketWeightGradExec(be, ctx, task.Model(), task.Loss, tr.Params(), views, gt, l)
			if err != nil {
				t.Fatal(err)
			}
			defer bucketed.Finalize()
			wantLoss, wantGrads, err := per.Exec(b.Inputs, b.Labels, ws)
			if err != nil {
				t.Fatal(err)
			}
			loss, got, err := bucketed.Exec(b.Inputs, b.Labels, ws)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(l.Buckets) {
				t.Fatalf("%d outputs for %d buckets", len(got), len(l.Buckets))
			}
			if !bytes.Equal(tensorBytes(t, loss), tensorBytes(t, wantLoss)) {
				t.Fatal("the losses differ")
			}
			flat := make([][]byte, len(got))
			written := make([][]bool, len(got))
			for k, g := range got {
				flat[k] = tensorBytes(t, g)
				if n := l.Buckets[k].Size * gt.Size(); len(flat[k]) != n {
					t.Fatalf("bucket %d: %d bytes, want %d", k, len(flat[k]), n)
				}
				written[k] = make([]bool, len(flat[k]))
			}
			sz := gt.Size()
			for i, p := range tr.Params() {
				pl := l.Places[l.Index(p.Name)]
				lo, hi := pl.Offset*sz, (pl.Offset+pl.Len)*sz
				if !bytes.Equal(flat[pl.Bucket][lo:hi], tensorBytes(t, wantGrads[i])) {
					t.Errorf("%s: the bucket's bytes differ from the parameter's gradient", p.Name)
				}
				for j := lo; j < hi; j++ {
					written[pl.Bucket][j] = true
				}
			}
			padding := 0
			for k := range flat {
				for j, w := range written[k] {
					if !w {
						padding++
						if flat[k][j] != 0 {
							t.Fatalf("bucket %d byte %d: %d in the padding", k, j, flat[k][j])
						}
					}
				}
			}
			if padding == 0 || len(l.Buckets) < 2 {
				t.Fatalf("%d buckets, %d bytes of padding: the layout does not test the placement", len(l.Buckets), padding)
			}
		})
	}
}
