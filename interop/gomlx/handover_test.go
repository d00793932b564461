package gomlxinterop_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// inOptimizerLayout returns t's values in p's layout, transposed where
// needed by GoMLX's own Transpose op (an implementation independent of the
// adapter's).
func inOptimizerLayout(t *testing.T, be backends.Backend, p gomlxinterop.Param, x *tensors.Tensor) []float32 {
	t.Helper()
	if p.Layout == gomlxinterop.AsIs {
		return tensors.MustCopyFlatData[float32](x)
	}
	local, err := x.LocalClone()
	if err != nil {
		t.Fatal(err)
	}
	perm := make([]int, x.Rank()) // the first axis moved last
	for i := range perm {
		perm[i] = (i + 1) % len(perm)
	}
	e, err := graph.NewExec(be, func(x *graph.Node) *graph.Node { return graph.TransposeAllAxes(x, perm...) })
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Exec(local)
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](out[0])
}

// oneRank returns a trainer of task on one rank with cfg.
func oneRank(t *testing.T, be backends.Backend, task toy.Task, cfg gomlxinterop.Config) *gomlxinterop.Trainer {
	t.Helper()
	x, y := task.Batch(0, 0, perRank)
	tr, err := gomlxinterop.NewTrainer(context.Background(), inproc.Communicators(1)[0], be, toy.Context(seed), task.Model(), task.Loss,
		gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// tasks are the MLP (Dense weights of rank 2) and the transformer (rank-3
// attention projections with rank-2 biases, embeddings, layer norms).
var tasks = []struct {
	name string
	task toy.Task
}{{"mlp", toy.NewData(toy.Small, 11)}, {"transformer", toy.Tiny}}

// TestInitialValues checks that the optimizer starts from the variables'
// initial values exactly: its master weights, in its layout, equal GoMLX's
// variables as initialised (read from a second context of the same seed)
// transposed by GoMLX, bit for bit.
func TestInitialValues(t *testing.T) {
	be := newBackend(t)
	tr := oneRank(t, be, toy.NewData(toy.Small, 11), adamConfig())
	ref, err := gomlxinterop.NewGradExec(be, toy.Context(seed), toy.Small.Model(), toy.Loss, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := toy.NewData(toy.Small, 11)
	x, y := data.Batch(0, 0, perRank)
	if err := ref.Build([]*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
		t.Fatal(err)
	}
	pieces, err := tr.Optimizer().ReadPieces()
	if err != nil {
		t.Fatal(err)
	}
	master := fullState(pieces)
	for i, p := range tr.Params() {
		want := inOptimizerLayout(t, be, p, ref.Vars()[i].MustValue())
		if k := firstDiff(master[p.Name][0], want); k >= 0 {
			t.Errorf("%s: master[%d] = %v, initial variable %v", p.Name, k, master[p.Name][0][k], want[k])
		}
	}
}

// TestWeightsRoundTrip checks the hand-over of the gathered weights, after
// a few steps, for every recipe and both layouts: each variable holds the
// optimizer's Weights (FP8 dequantized with scale_inv, or the
// high-precision copy), transposed by GoMLX where the layout says so, bit
// for bit; and reading the variables back into the optimizer's layout
// (Values) gives Weights again.
func TestWeightsRoundTrip(t *testing.T) {
	for _, rc := range []fp8.Recipe{
		{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
		{Format: fp8.E5M2, Scaling: fp8.TensorDelayed, HistoryLen: 4},
		{Format: fp8.E4M3, Scaling: fp8.Block1x128},
		{Format: fp8.E4M3, Scaling: fp8.Block128x128},
		{Format: fp8.E4M3, Scaling: fp8.MXFP8},
	} {
		for _, layout := range []gomlxinterop.Layout{gomlxinterop.AsIs, gomlxinterop.Transposed} {
			for _, tk := range tasks {
				if tk.name != "mlp" && rc.Scaling != fp8.Block1x128 {
					continue
				}
				t.Run(fmt.Sprintf("%s/%v/%v", tk.name, rc, layout), func(t *testing.T) {
					be := newBackend(t)
					cfg := adamConfig()
					cfg.Optimizer.Recipe = rc
					cfg.Optimizer.HighPrecisionType = buffer.Float32
					cfg.Rules.Layout = func(v *mlctx.Variable) gomlxinterop.Layout {
						if v.Shape().Rank() < 2 {
							return gomlxinterop.AsIs
						}
						return layout
					}
					tr := oneRank(t, be, tk.task, cfg)
					if !tr.Shared() {
						t.Error("simplego has shared buffers, but the variables are not shared")
					}
					for s := range 3 {
						x, y := tk.task.Batch(s, 0, perRank)
						if _, _, err := tr.Step(context.Background(), gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}); err != nil {
							t.Fatal(err)
						}
					}
					for _, p := range tr.Params() {
						if !p.Var.MustValue().IsShared() {
							t.Errorf("%s: after steps the variable no longer shares the backend's memory", p.Name)
						}
						want, err := tr.Optimizer().Weights(p.Name)
						if err != nil {
							t.Fatal(err)
						}
						if k := firstDiff(inOptimizerLayout(t, be, p, p.Var.MustValue()), want); k >= 0 {
							t.Fatalf("%s: variable differs from the gathered weights at %d", p.Name, k)
						}
						back, err := gomlxinterop.Values(p)
						if err != nil {
							t.Fatal(err)
						}
						if k := firstDiff(back, want); k >= 0 {
							t.Fatalf("%s: Values differs from the gathered weights at %d", p.Name, k)
						}
					}
				})
			}
		}
	}
}

// TestGradsRoundTrip checks the hand-over of gradients: the optimizer's
// gradient views hold GoMLX's gradients in the parameters' layouts
// (transposed by GoMLX), rounded to BF16 to nearest even (fp8.RoundBF16)
// or exactly for FP32 gradients.
func TestGradsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		dt buffer.DType
		tk int
	}{{buffer.BFloat16, 0}, {buffer.Float32, 0}, {buffer.BFloat16, 1}} {
		dt, tk := c.dt, tasks[c.tk]
		t.Run(tk.name+"/"+dt.String(), func(t *testing.T) {
			be := newBackend(t)
			cfg := adamConfig()
			cfg.Optimizer.GradType = dt
			tr := oneRank(t, be, tk.task, cfg)
			x, y := tk.task.Batch(5, 0, perRank)
			_, grads, err := tr.GradExec().Exec([]*tensors.Tensor{x}, []*tensors.Tensor{y})
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.HandOver().Grads(grads); err != nil {
				t.Fatal(err)
			}
			for i, p := range tr.Params() {
				want := inOptimizerLayout(t, be, p, grads[i])
				v, err := tr.Optimizer().Grad(p.Name)
				if err != nil {
					t.Fatal(err)
				}
				raw := v.Data.(buffer.HostBuffer)
				got := make([]float32, len(want))
				for k := range got {
					if dt == buffer.Float32 {
						got[k] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:]))
					} else {
						got[k] = fp8.Float32FromBF16(binary.LittleEndian.Uint16(raw[2*k:]))
						want[k] = fp8.RoundBF16(want[k])
					}
				}
				if k := firstDiff(got, want); k >= 0 {
					t.Fatalf("%s: gradient view[%d] = %v, GoMLX's gradient %v", p.Name, k, got[k], want[k])
				}
			}
		})
	}
}

// TestBlockAxis checks that block and tile recipes act along the right axis
// of a GoMLX Dense weight [in, out]: with the default (Transposed) layout
// the weight GoMLX reads equals fp8's reference cast (fp8.Quantize, then
// Dequantize) of the [out, in] matrix, so each 1x128 or 1x32 block runs
// along in; as-is it equals the cast of [in, out] instead, and the two
// differ. 128x128 tiles give the same values in both layouts.
func TestBlockAxis(t *testing.T) {
	const in, out = 256, 3
	shape := toy.Shape{In: in, Out: out}
	for _, rc := range []fp8.Recipe{
		{Format: fp8.E4M3, Scaling: fp8.Block1x128},
		{Format: fp8.E4M3, Scaling: fp8.MXFP8},
		{Format: fp8.E4M3, Scaling: fp8.Block128x128},
	} {
		t.Run(rc.String(), func(t *testing.T) {
			vals := map[gomlxinterop.Layout][]float32{}
			for _, layout := range []gomlxinterop.Layout{gomlxinterop.Transposed, gomlxinterop.AsIs} {
				be := newBackend(t)
				data := toy.NewData(shape, 1)
				x, y := data.Batch(0, 0, 4)
				cfg := adamConfig()
				cfg.Optimizer.Recipe = rc
				cfg.Rules.Layout = func(v *mlctx.Variable) gomlxinterop.Layout {
					if v.Shape().Rank() < 2 {
						return gomlxinterop.AsIs
					}
					return layout
				}
				// The reference: the initial weight, [in, out] as GoMLX holds it.
				ref, err := gomlxinterop.NewGradExec(be, toy.Context(seed), shape.Model(), toy.Loss, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := ref.Build([]*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
					t.Fatal(err)
				}
				w0 := ref.Vars()[0].MustValue()
				tr, err := gomlxinterop.NewTrainer(context.Background(), inproc.Communicators(1)[0], be, toy.Context(seed), shape.Model(), toy.Loss,
					gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer tr.Close()
				p := tr.Params()[0]
				if p.Var.Name() != "weights" || p.Layout != layout {
					t.Fatalf("first parameter %s (%v), want the Dense weights %v", p.Name, p.Layout, layout)
				}
				// fp8's reference cast of the optimizer's view ([out, in]
				// transposed, [in, out] as-is), dequantized.
				master := inOptimizerLayout(t, be, p, w0)
				q, err := fp8.Quantize(master, p.Shape, rc, nil)
				if err != nil {
					t.Fatal(err)
				}
				deq := make([]float32, len(master))
				if err := q.Dequantize(deq); err != nil {
					t.Fatal(err)
				}
				if k := firstDiff(inOptimizerLayout(t, be, p, p.Var.MustValue()), deq); k >= 0 {
					t.Fatalf("%v: weight GoMLX reads differs at %d from fp8's cast of %v", layout, k, p.Shape)
				}
				vals[layout] = tensors.MustCopyFlatData[float32](p.Var.MustValue())
			}
			same := firstDiff(vals[gomlxinterop.Transposed], vals[gomlxinterop.AsIs]) < 0
			if tiles := rc.Scaling == fp8.Block128x128; same != tiles {
				t.Errorf("transposed and as-is weights equal: %v, want %v", same, tiles)
			}
		})
	}
}
