package gomlxinterop_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/distopt/distopt/collective/inproc"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/optimizer"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
)

// Two in-process ranks train a GoMLX linear model y = x·W + b with distopt:
// each rank owns its GoMLX context and backend, feeds its own batch, and
// after every step both hold the same gathered weights in their variables.
func ExampleTrainer() {
	model := func(ctx *mlctx.Context, _ any, in []*graph.Node) []*graph.Node {
		return []*graph.Node{layers.DenseWithBias(ctx.In("linear"), in[0], 1)}
	}
	comms := inproc.Communicators(2)
	out := make([]string, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			ctx := context.Background()
			be, err := simplego.New("ops_sequential") // see the README on simplego's scheduler
			if err != nil {
				out[r] = err.Error()
				return
			}
			gctx := mlctx.New()
			gctx.SetParam(mlctx.ParamInitialSeed, int64(1)) // every rank starts from the same model
			// Rank r's batch: two examples of y = 2*x0 - x1 + 1.
			x := tensors.FromValue([][]float32{{1, float32(r)}, {float32(-r), 2}})
			y := tensors.FromValue([][]float32{{3 - float32(r)}, {-1 - 2*float32(r)}})
			batch := gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
			tr, err := gomlxinterop.NewTrainer(ctx, comms[r], be, gctx, model, losses.MeanSquaredError, batch,
				gomlxinterop.Config{Optimizer: optimizer.Config{LR: optimizer.Constant(0.05)}})
			if err != nil {
				out[r] = err.Error()
				return
			}
			defer tr.Close()
			first, _, err := tr.Step(ctx, batch)
			last := first
			for range 99 {
				if err == nil {
					last, _, err = tr.Step(ctx, batch)
				}
			}
			if err != nil {
				out[r] = err.Error()
				return
			}
			p := tr.Params()[0]
			out[r] = fmt.Sprintf("rank %d: %s as %v %v, loss fell: %t", r, p.Name, p.Shape, p.Layout, last < first/10)
		})
	}
	wg.Wait()
	for _, s := range out {
		fmt.Println(s)
	}
	// Output:
	// rank 0: /linear/dense/weights as [1 2] transposed, loss fell: true
	// rank 1: /linear/dense/weights as [1 2] transposed, loss fell: true
}

// Params maps the variables a gradient graph trains to distopt parameters:
// Dense kernels [in, out] are handed over transposed, as [out, in], so that
// block scales run along in; biases are gathered in high precision.
func ExampleParams() {
	be, err := simplego.New("ops_sequential")
	if err != nil {
		fmt.Println(err)
		return
	}
	model := func(ctx *mlctx.Context, _ any, in []*graph.Node) []*graph.Node {
		return []*graph.Node{layers.DenseWithBias(ctx.In("layer"), in[0], 4)}
	}
	e, err := gomlxinterop.NewGradExec(be, mlctx.New(), model, losses.MeanSquaredError, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	x := tensors.FromValue([][]float32{{1, 2, 3}})
	y := tensors.FromValue([][]float32{{0, 0, 0, 0}})
	if err := e.Build([]*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
		fmt.Println(err)
		return
	}
	params, err := gomlxinterop.Params(e.Vars(), gomlxinterop.Rules{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range params {
		fmt.Printf("%s %v -> %v %v, high precision %t\n", p.Name, p.Var.Shape().Dimensions, p.Shape, p.Layout, p.HighPrecision)
	}
	// Output:
	// /layer/dense/weights [3 4] -> [4 3] transposed, high precision false
	// /layer/dense/biases [4] -> [4] as-is, high precision true
}
