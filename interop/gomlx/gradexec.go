package gomlxinterop

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"
)

// GradExec runs a GoMLX model's forward and backward pass and returns the
// loss and the gradient of every trainable variable the graph uses, in the
// order of Vars. It does not update any variable: the optimizer step
// happens outside the graph.
type GradExec struct {
	backend   backends.Backend
	ctx       *mlctx.Context
	exec      *mlctx.Exec
	trainable func(*mlctx.Variable) bool
	vars      []*mlctx.Variable
	numInputs int
}

// NewGradExec returns an executor of model and loss on backend with the
// variables of ctx. The graph is as train.Trainer builds it: ctx marked as
// training, loss reduced to its mean if it is not a scalar, plus any loss
// the model added with train.AddLoss (regularisers). trainable selects the
// variables that get a gradient (nil: DefaultTrainable). Call Build before
// Vars.
func NewGradExec(backend backends.Backend, ctx *mlctx.Context, model train.ModelFn, loss train.LossFn, trainable func(*mlctx.Variable) bool) (*GradExec, error) {
	if trainable == nil {
		trainable = DefaultTrainable
	}
	e := &GradExec{backend: backend, ctx: ctx, trainable: trainable}
	exec, err := mlctx.NewExec(backend, ctx, func(ctx *mlctx.Context, in []*graph.Node) []*graph.Node {
		return e.graph(ctx, model, loss, in)
	})
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: gradient executor: %w", err)
	}
	e.exec = exec
	return e, nil
}

// graph builds loss and gradients; it panics (GoMLX turns the panic into
// the error of Exec) if the trainable variables differ from Vars.
func (e *GradExec) graph(ctx *mlctx.Context, model train.ModelFn, lossFn train.LossFn, in []*graph.Node) []*graph.Node {
	g := in[0].Graph()
	ctx.SetTraining(g, true)
	pred := model(ctx, nil, in[:e.numInputs])
	if lossFn != nil {
		l := lossFn(in[e.numInputs:], pred)
		if !l.Shape().IsScalar() {
			l = graph.ReduceAllMean(l)
		}
		train.AddLoss(ctx, l)
	}
	loss := train.GetLosses(ctx, g)
	var vars []*mlctx.Variable
	var nodes []*graph.Node
	for v := range ctx.IterVariables() {
		if e.trainable(v) && v.InUseByGraph(g) {
			vars = append(vars, v)
			nodes = append(nodes, v.ValueGraph(g))
		}
	}
	if e.vars == nil {
		e.vars = vars
	} else if !slices.Equal(vars, e.vars) {
		panic(fmt.Errorf("%w: this graph trains %d variables, the first one %d", ErrGraph, len(vars), len(e.vars)))
	}
	return append([]*graph.Node{loss}, graph.Gradient(loss, nodes...)...)
}

// Build builds and compiles the graph for batches shaped like inputs and
// labels and initialises the context's variables that have no value yet;
// after it, Vars lists the parameters. Exec builds graphs for new shapes by
// itself.
func (e *GradExec) Build(inputs, labels []*tensors.Tensor) error {
	args, err := e.args(inputs, labels)
	if err != nil {
		return err
	}
	if err := e.exec.PreCompile(args...); err != nil {
		return fmt.Errorf("gomlxinterop: building the gradient graph: %w", err)
	}
	if err := e.ctx.InitializeVariables(e.backend, nil); err != nil {
		return fmt.Errorf("gomlxinterop: initialising variables: %w", err)
	}
	return nil
}

// Vars returns the variables that get gradients, in the order of Exec's
// gradients (the context's variable order); nil before Build.
func (e *GradExec) Vars() []*mlctx.Variable { return e.vars }

// Exec runs forward and backward on one batch and returns the loss and the
// gradients in the order of Vars. The tensors are the backend's outputs:
// the caller finalises them (FinalizeAll) when done.
func (e *GradExec) Exec(inputs, labels []*tensors.Tensor) (loss *tensors.Tensor, grads []*tensors.Tensor, err error) {
	args, err := e.args(inputs, labels)
	if err != nil {
		return nil, nil, err
	}
	out, err := e.exec.Exec(args...)
	if err != nil {
		return nil, nil, fmt.Errorf("gomlxinterop: forward and backward: %w", err)
	}
	if len(out) != 1+len(e.vars) {
		return nil, nil, fmt.Errorf("%w: %d outputs for %d variables", ErrGraph, len(out), len(e.vars))
	}
	return out[0], out[1:], nil
}

func (e *GradExec) args(inputs, labels []*tensors.Tensor) ([]any, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("%w: no inputs", ErrHandOver)
	}
	if e.numInputs != 0 && e.numInputs != len(inputs) {
		return nil, fmt.Errorf("%w: %d inputs, the graph was built for %d", ErrHandOver, len(inputs), e.numInputs)
	}
	e.numInputs = len(inputs)
	args := make([]any, 0, len(inputs)+len(labels))
	for _, t := range inputs {
		args = append(args, t)
	}
	for _, t := range labels {
		args = append(args, t)
	}
	return args, nil
}

// Context returns the GoMLX context whose variables the graph uses.
func (e *GradExec) Context() *mlctx.Context { return e.ctx }
