package gomlxinterop

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// WeightGradExec runs a GoMLX model's forward and backward pass on the
// weights as distopt gathered them: the graph takes every parameter's FP8
// codes and scale_inv (or its high-precision copy) as inputs, decodes them
// (DecodeFP8), puts them back into the variable's layout, and hands them to
// the model in place of the variables' values. Its outputs are the loss and
// every parameter's gradient already in distopt's layout and gradient type
// (float32 or bfloat16; XLA converts to bfloat16 rounding to nearest even,
// simplego truncates), ready to be copied byte for byte into the gradient
// views. GPUTrainer's graph instead lays them out as distopt's buckets, one
// output each, which the step reads in place (GPUConfig.CopyGradients).
//
// The variables' own values are never read by the graph: GoMLX still feeds
// them (every variable a graph uses is a parameter of it), so a caller that
// keeps the weights only in distopt's buffers gives them placeholder values
// of the right shape.
type WeightGradExec struct {
	exec      *mlctx.Exec
	params    []Param
	views     []optimizer.ParamView
	gradType  buffer.DType
	numInputs int
	opts      weightGradOptions
}

// weightGradOptions are a WeightGradExec's choices that GPUConfig makes.
type weightGradOptions struct {
	// keepDecoded leaves the decoded weights to XLA, which keeps them from
	// forward to backward (GPUConfig.KeepDecoded); false (the default) has
	// the DotGeneral gradient decode them again (see redecode.go).
	keepDecoded bool
	// buckets, when set, makes the outputs one gradient per bucket of this
	// layout (bucketGradients) for optimizer.BindGrads, instead of one
	// per parameter.
	buckets *shard.Layout
}

// NewWeightGradExec returns the executor of model and loss on backend for
// params (in gradient order) read from views (opt.Param of each, same
// order); gradType is the optimizer's Config.GradType.
func NewWeightGradExec(backend backends.Backend, ctx *mlctx.Context, model train.ModelFn, loss train.LossFn, params []Param, views []optimizer.ParamView, gradType buffer.DType) (*WeightGradExec, error) {
	return newWeightGradExec(backend, ctx, model, loss, params, views, gradType, weightGradOptions{})
}

// newWeightGradExec is NewWeightGradExec with GPUConfig's choices.
func newWeightGradExec(backend backends.Backend, ctx *mlctx.Context, model train.ModelFn, loss train.LossFn, params []Param, views []optimizer.ParamView, gradType buffer.DType, opts weightGradOptions) (*WeightGradExec, error) {
	if len(views) != len(params) {
		return nil, fmt.Errorf("%w: %d views for %d parameters", ErrHandOver, len(views), len(params))
	}
	for i, v := range views {
		if v.Name != params[i].Name {
			return nil, fmt.Errorf("%w: view %d is %q, parameter %q", ErrHandOver, i, v.Name, params[i].Name)
		}
	}
	if gradType != buffer.Float32 && gradType != buffer.BFloat16 {
		return nil, fmt.Errorf("%w: gradient type %v", ErrHandOver, gradType)
	}
	e := &WeightGradExec{params: params, views: views, gradType: gradType, opts: opts}
	exec, err := mlctx.NewExec(backend, ctx.Reuse(), func(ctx *mlctx.Context, in []*graph.Node) []*graph.Node {
		return e.graph(ctx, model, loss, in)
	})
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: weight gradient executor: %w", err)
	}
	e.exec = exec
	return e, nil
}

// NumWeightInputs returns the number of weight tensors Exec takes: two per
// FP8 parameter (codes, scale_inv), one per high-precision parameter.
func (e *WeightGradExec) NumWeightInputs() int {
	n := 0
	for _, v := range e.views {
		n += weightInputs(v)
	}
	return n
}

func weightInputs(v optimizer.ParamView) int {
	if v.HighPrecision {
		return 1
	}
	return 2
}

// graph builds loss and gradients on the decoded weights; it panics (GoMLX
// turns the panic into the error of Exec) if the model uses a trainable
// variable that is not a parameter.
func (e *WeightGradExec) graph(ctx *mlctx.Context, model train.ModelFn, lossFn train.LossFn, in []*graph.Node) []*graph.Node {
	g := in[0].Graph()
	ctx.SetTraining(g, true)
	batch, weights := in[:len(in)-e.NumWeightInputs()], in[len(in)-e.NumWeightInputs():]
	ws, forget := e.decodeAll(weights)
	defer forget()
	orig := make([]*graph.Node, len(e.params))
	for i, p := range e.params {
		orig[i] = p.Var.ValueGraph(g)
		p.Var.SetValueGraph(ws[i])
	}
	pred := model(ctx, nil, batch[:e.numInputs])
	if lossFn != nil {
		l := lossFn(batch[e.numInputs:], pred)
		if !l.Shape().IsScalar() {
			l = graph.ReduceAllMean(l)
		}
		train.AddLoss(ctx, l)
	}
	loss := train.GetLosses(ctx, g)
	for i, p := range e.params {
		p.Var.SetValueGraph(orig[i]) // unchanged: not an output, not donated
	}
	e.checkVariables(ctx, g)
	grads := graph.Gradient(loss, ws...)
	for i, gr := range grads {
		gr = toLayout(gr, e.params[i].Layout)
		if e.gradType == buffer.BFloat16 {
			gr = graph.ConvertDType(gr, dtypes.BFloat16)
		}
		grads[i] = gr
	}
	if e.opts.buckets != nil {
		grads = bucketGradients(e.opts.buckets, e.params, grads)
	}
	return append([]*graph.Node{loss}, grads...)
}

// checkVariables panics (GoMLX turns the panic into the error of Exec) if
// graph g uses a trainable variable that is not a parameter.
func (e *WeightGradExec) checkVariables(ctx *mlctx.Context, g *graph.Graph) {
	known := map[*mlctx.Variable]bool{}
	for _, p := range e.params {
		known[p.Var] = true
	}
	for v := range ctx.IterVariables() {
		if v.Trainable && v.InUseByGraph(g) && !known[v] {
			panic(fmt.Errorf("%w: the graph uses trainable variable %q, which is not a parameter", ErrGraph, v.ScopeAndName()))
		}
	}
}

// decodeAll decodes every parameter's weights from the graph's weight
// inputs into the variables' layouts. Unless keepDecoded, each FP8 one is
// marked for the DotGeneral gradient to decode again (redecode.go); forget
// drops the marks once the graph is built.
func (e *WeightGradExec) decodeAll(weights []*graph.Node) (ws []*graph.Node, forget func()) {
	ws = make([]*graph.Node, len(e.params))
	forget = func() {
		for _, w := range ws {
			if w != nil {
				forgetRedecode(w)
			}
		}
	}
	defer func() {
		if r := recover(); r != nil {
			forget() // the marks made before a parameter that does not decode
			panic(r)
		}
	}()
	for i, p := range e.params {
		v := e.views[i]
		w, err := decodeView(weights, v)
		if err != nil {
			panic(err)
		}
		ws[i] = fromLayout(w, p.Layout)
		if !v.HighPrecision && !e.opts.keepDecoded {
			codes, inv, layout := weights[0], weights[1], p.Layout
			markRedecode(ws[i], func(after *graph.Node) *graph.Node {
				again, err := decodeFP8(codes, inv, v.Shape, v.Recipe, after)
				if err != nil {
					panic(err) // decodeView decoded the same inputs
				}
				return fromLayout(again, layout)
			})
		}
		weights = weights[weightInputs(v):]
	}
	return ws, forget
}

// decodeView returns the float32 values of view v from the first weight
// inputs: FP8 codes and scale_inv decoded, or the high-precision copy
// widened.
func decodeView(weights []*graph.Node, v optimizer.ParamView) (*graph.Node, error) {
	if v.HighPrecision {
		w := weights[0]
		want := dtypes.Float32
		if v.DType == buffer.BFloat16 {
			want = dtypes.BFloat16
		}
		if w.DType() != want || w.Shape().Size() != elements(v.Shape) {
			return nil, fmt.Errorf("%w: %q is %s, want %s %v", ErrHandOver, v.Name, w.Shape(), want, v.Shape)
		}
		return graph.Reshape(graph.ConvertDType(w, dtypes.Float32), v.Shape...), nil
	}
	return DecodeFP8(weights[0], weights[1], v.Shape, v.Recipe)
}

// fromLayout returns distopt's value w in the variable's layout: for
// Transposed the last axis moves back to the front.
func fromLayout(w *graph.Node, l Layout) *graph.Node {
	if l != Transposed {
		return w
	}
	k := w.Rank() - 1
	perm := []int{k}
	for a := range k {
		perm = append(perm, a)
	}
	return graph.TransposeAllAxes(w, perm...)
}

// toLayout returns the variable-shaped x in distopt's layout: for
// Transposed the first axis moves last.
func toLayout(x *graph.Node, l Layout) *graph.Node {
	if l != Transposed {
		return x
	}
	var perm []int
	for a := 1; a < x.Rank(); a++ {
		perm = append(perm, a)
	}
	return graph.TransposeAllAxes(x, append(perm, 0)...)
}

func elements(shape []int) int {
	rows, cols := fp8.Matrix(shape)
	return rows * cols
}

// numGrads is the number of gradient outputs: one per bucket of the
// layout when the gradients are lent (weightGradOptions.buckets), else one
// per parameter.
func (e *WeightGradExec) numGrads() int {
	if e.opts.buckets != nil {
		return len(e.opts.buckets.Buckets)
	}
	return len(e.params)
}

// Exec runs forward and backward on one batch with the given weights (in
// the order of the parameters: codes then scale_inv for FP8, the copy for
// high precision) and returns the loss and the gradients, in distopt's
// layout and gradient type: one per parameter (NewWeightGradExec), or one
// per bucket in a GPUTrainer that lends them to the step. The caller
// finalises the outputs.
func (e *WeightGradExec) Exec(inputs, labels, weights []*tensors.Tensor) (loss *tensors.Tensor, grads []*tensors.Tensor, err error) {
	if len(inputs) == 0 {
		return nil, nil, fmt.Errorf("%w: no inputs", ErrHandOver)
	}
	if e.numInputs != 0 && e.numInputs != len(inputs) {
		return nil, nil, fmt.Errorf("%w: %d inputs, the graph was built for %d", ErrHandOver, len(inputs), e.numInputs)
	}
	if len(weights) != e.NumWeightInputs() {
		return nil, nil, fmt.Errorf("%w: %d weight tensors, want %d", ErrHandOver, len(weights), e.NumWeightInputs())
	}
	e.numInputs = len(inputs)
	args := make([]any, 0, len(inputs)+len(labels)+len(weights))
	for _, ts := range [][]*tensors.Tensor{inputs, labels, weights} {
		for _, t := range ts {
			args = append(args, t)
		}
	}
	out, err := e.exec.Exec(args...)
	if err != nil {
		return nil, nil, fmt.Errorf("gomlxinterop: forward and backward: %w", err)
	}
	if want := 1 + e.numGrads(); len(out) != want {
		return nil, nil, fmt.Errorf("%w: %d outputs, want %d (the loss and %d gradients)", ErrGraph, len(out), want, want-1)
	}
	return out[0], out[1:], nil
}

// Finalize releases the compiled graphs.
func (e *WeightGradExec) Finalize() { e.exec.Finalize() }

// DecodeWeights returns every parameter's weights as the model reads them
// from the given weight inputs (same order as Exec's): decoded, in the
// variable's layout, float32. It runs a graph of its own on backend, for
// inspection and tests (the decode the training graph fuses into its
// consumers, materialised).
func (e *WeightGradExec) DecodeWeights(backend backends.Backend, weights []*tensors.Tensor) ([]*tensors.Tensor, error) {
	if len(weights) != e.NumWeightInputs() {
		return nil, fmt.Errorf("%w: %d weight tensors, want %d", ErrHandOver, len(weights), e.NumWeightInputs())
	}
	exec, err := graph.NewExec(backend, func(in []*graph.Node) []*graph.Node {
		out := make([]*graph.Node, len(e.params))
		for i, p := range e.params {
			w, err := decodeView(in, e.views[i])
			if err != nil {
				panic(err)
			}
			in = in[weightInputs(e.views[i]):]
			out[i] = fromLayout(w, p.Layout)
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: decoding weights: %w", err)
	}
	defer exec.Finalize()
	args := make([]any, len(weights))
	for i, w := range weights {
		args[i] = w
	}
	out, err := exec.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: decoding weights: %w", err)
	}
	return out, nil
}
