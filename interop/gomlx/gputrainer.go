//go:build cgo && linux

package gomlxinterop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// GPUTrainer is one data-parallel rank training a GoMLX model on a GPU with
// distopt's CUDA backend: XLA (through a PJRT CUDA plugin) computes loss
// and gradients on the GPU, the gradients are copied device to device into
// distopt's gradient views on distopt's stream, distopt steps, and the
// next forward pass reads the gathered FP8 codes and scale_inv where
// distopt keeps them, through PJRT views of its memory (WeightGradExec
// decodes them in the graph). The model's weights live once, in distopt's
// gathered buffers. Not safe for concurrent use.
//
// Ordering is explicit. After the forward and backward pass the host reads
// the loss (PJRT's wait for the execution) and synchronises the GPU's
// primary context (every stream of XLA's and distopt's), so the copies
// queued next read finished gradients; after distopt's step the host waits
// for its gathers and its stream, so the next execution reads finished
// weights. Timing reports the cost of both waits.
type GPUTrainer struct {
	be     *gpu.Backend
	xb     *xla.Backend
	client *pjrt.Client
	dev    backends.DeviceNum
	opt    *optimizer.Optimizer
	params []Param
	exec   *WeightGradExec

	weights []weightInput     // the graph's weight inputs, in order
	holder  buffer.Buffer     // the memory the variables' placeholder values view
	grads   []*tensors.Tensor // the last forward pass's gradients, kept until Update
	timing  Timing
}

// Timing accumulates where a GPUTrainer's steps spent their time.
type Timing struct {
	Steps   int
	Compute time.Duration // forward and backward, until the loss is on the host
	Sync    time.Duration // the context synchronisation after the execution
	Copy    time.Duration // queueing the gradient copies
	Update  time.Duration // distopt's step, its gathers and the stream's wait
	Views   int           // weight inputs read in place through PJRT views
	Copies  int           // weight inputs copied (not 16-byte aligned for XLA)
}

// weightInput is one weight tensor of the graph and where it comes from.
type weightInput struct {
	src    buffer.DeviceBuffer // distopt's buffer
	t      *tensors.Tensor     // the graph's input: a view of src, or XLA's copy
	copyTo uintptr             // the copy's device address; 0 for a view
}

// GPUConfig configures a GPUTrainer.
type GPUConfig struct {
	// Optimizer is distopt's configuration (LossScaler not supported).
	Optimizer optimizer.Config
	// Rules map the variables to parameters; nil fields take the defaults.
	Rules Rules
}

// NewGPUTrainer builds the trainer of model and loss for batches shaped
// like first on distopt's backend be and communicator comm (those of
// gpu.SetupFromEnv) and the GoMLX XLA backend xb, which must run on be's
// GPU (ErrDevice). The context's variables are created and initialised by
// XLA, handed to distopt as initial values, and then released: from then
// on each variable's value is a placeholder that the graph never reads.
func NewGPUTrainer(ctx context.Context, be *gpu.Backend, comm collective.Communicator, xb *xla.Backend, gctx *mlctx.Context, model train.ModelFn, loss train.LossFn, first Batch, cfg GPUConfig) (*GPUTrainer, error) {
	if cfg.Optimizer.LossScaler != nil {
		return nil, fmt.Errorf("gomlxinterop: loss scaling is not supported by GPUTrainer: %w", optimizer.ErrConfig)
	}
	client, dev, err := xlaDevice(xb, be.Ordinal())
	if err != nil {
		return nil, err
	}
	rules := cfg.Rules.withDefaults()
	vars, err := discover(xb, gctx, model, loss, first, rules.Trainable)
	if err != nil {
		return nil, err
	}
	params, err := Params(vars, rules)
	if err != nil {
		return nil, err
	}
	opt, err := optimizer.New(ctx, comm, be, OptimizerParams(params), Initial(params), cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	t := &GPUTrainer{be: be, xb: xb, client: client, dev: dev, opt: opt, params: params}
	if err := t.setup(gctx, model, loss); err != nil {
		return nil, errors.Join(err, t.Close())
	}
	return t, nil
}

// setup replaces the variables' values by placeholders, binds the weight
// inputs to distopt's gathered buffers and builds the graph.
func (t *GPUTrainer) setup(gctx *mlctx.Context, model train.ModelFn, loss train.LossFn) error {
	if err := t.placeholders(); err != nil {
		return err
	}
	views, err := t.bind()
	if err != nil {
		return err
	}
	t.exec, err = NewWeightGradExec(t.xb, gctx, model, loss, t.params, views, t.opt.Config().GradType)
	if err != nil {
		return err
	}
	return t.refresh()
}

// discover builds (without compiling) the gradient graph of model for
// batches shaped like first, which creates the context's variables, then
// initialises them on backend, and returns the trainable ones the graph
// uses, in the context's order.
func discover(backend backends.Backend, gctx *mlctx.Context, model train.ModelFn, loss train.LossFn, first Batch, trainable func(*mlctx.Variable) bool) (vars []*mlctx.Variable, err error) {
	e := &GradExec{backend: backend, ctx: gctx, trainable: trainable, numInputs: len(first.Inputs)}
	if len(first.Inputs) == 0 {
		return nil, fmt.Errorf("%w: no inputs", ErrHandOver)
	}
	err = catch(func() {
		g := graph.NewGraph(backend, "gomlxinterop_discover")
		defer g.Finalize()
		var in []*graph.Node
		for i, x := range append(append([]*tensors.Tensor(nil), first.Inputs...), first.Labels...) {
			in = append(in, graph.Parameter(g, fmt.Sprintf("in%d", i), x.Shape()))
		}
		e.graph(gctx, model, loss, in)
	})
	if err != nil {
		return nil, fmt.Errorf("gomlxinterop: building the model: %w", err)
	}
	if err := gctx.InitializeVariables(backend, nil); err != nil {
		return nil, fmt.Errorf("gomlxinterop: initialising variables: %w", err)
	}
	return e.vars, nil
}

// catch runs fn and returns the error it panicked with, if any.
func catch(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	fn()
	return nil
}
