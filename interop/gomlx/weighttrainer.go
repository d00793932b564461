package gomlxinterop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
)

// GPUConfig configures a GPUTrainer.
type GPUConfig struct {
	// Optimizer is distopt's configuration (LossScaler not supported).
	Optimizer optimizer.Config
	// Rules map the variables to parameters; nil fields take the defaults.
	Rules Rules
	// KeepDecoded lets XLA keep each decoded FP8 weight from forward to
	// backward, as it does with any value backward reads: the whole model
	// in float32 at the end of the forward pass. False (the default): the
	// DotGeneral gradient of UseDotGeneralGradient decodes the weights
	// again, so a decode lives only around the product that reads it. For
	// measuring what the default saves.
	KeepDecoded bool
	// CopyGradients copies every gradient from XLA's outputs into distopt's
	// own gradient buffers. False (the default): the graph writes each
	// bucket's gradients as one output, in distopt's layout, and the step
	// reads them there (optimizer.Config.ExternalGradients): distopt holds
	// no gradient buffer (GradType bytes per parameter less) and nothing is
	// copied. Sharded gradients (Optimizer.ShardedGradients) always copy,
	// into the pool's buffers. For measuring what lending saves.
	CopyGradients bool
}

// lendsGradients reports whether the step reads the graph's gradient
// outputs in place (GPUConfig.CopyGradients).
func (c GPUConfig) lendsGradients() bool { return !c.CopyGradients && !c.Optimizer.ShardedGradients }

// Timing accumulates where a GPUTrainer's steps spent their time.
type Timing struct {
	Steps   int
	Compute time.Duration // forward and backward, until the loss is on the host
	Sync    time.Duration // the context synchronisation after the execution
	Copy    time.Duration // queueing the gradient copies, or lending the outputs (GPUConfig.CopyGradients)
	Update  time.Duration // distopt's step, its gathers and the stream's wait
	Views   int           // weight inputs read in place through PJRT views
	Copies  int           // weight inputs copied (not 16-byte aligned for XLA)
}

// weightDevice is the device side of a weightTrainer: where the graph's
// inputs live and how bytes move between them and distopt's buffers. The
// GPU's (gpuDevice) reads distopt's memory through PJRT views; the tests'
// host device copies, so that the CPU runs the rest of the same path.
type weightDevice interface {
	// placeholders gives every variable a value that the graph is fed but
	// never reads, and releases the values it had.
	placeholders(params []Param) error
	// input returns the graph input reading buf (dt, dims), and whether it
	// is a view of buf; one that is not is refreshed by a copy.
	input(buf buffer.Buffer, dt dtypes.DType, dims []int) (*tensors.Tensor, bool, error)
	// refresh copies the inputs that are not views and waits for distopt's
	// work, so that the next execution reads the last step's weights.
	refresh() error
	// sync waits for every write of the last execution.
	sync() error
	// copyGrads copies grads[i] into dst[i] (sizes already checked).
	copyGrads(dst []buffer.Buffer, grads []*tensors.Tensor) error
	// lend returns buffers of distopt's memory kind holding grads, for
	// optimizer.BindGrads: the GPU's are the outputs' own memory.
	lend(grads []*tensors.Tensor) ([]buffer.Buffer, error)
	// close releases the device's own memory.
	close() error
}

// weightTrainer is the rank of GPUTrainer without the device: the graph
// reads the weights where distopt gathered them (WeightGradExec), and the
// gradients go into the gradient views byte for byte.
type weightTrainer struct {
	dev     weightDevice
	opt     *optimizer.Optimizer
	params  []Param
	exec    *WeightGradExec
	weights []*tensors.Tensor // the graph's weight inputs, in order
	grads   []*tensors.Tensor // the last forward pass's gradients, until Update
	timing  Timing
	// keepDecoded is GPUConfig.KeepDecoded, for the weight gradient graph.
	keepDecoded bool
}

// newWeightTrainer makes the rank of model and loss on distopt's backend be
// and communicator comm, with the graph on gb and dev.
func newWeightTrainer(ctx context.Context, be backend.Backend, comm collective.Communicator, gb backends.Backend, dev weightDevice, gctx *mlctx.Context, model train.ModelFn, loss train.LossFn, first Batch, cfg GPUConfig) (*weightTrainer, error) {
	if cfg.Optimizer.LossScaler != nil {
		return nil, fmt.Errorf("gomlxinterop: loss scaling is not supported by GPUTrainer: %w", optimizer.ErrConfig)
	}
	rules := cfg.Rules.withDefaults()
	vars, err := discover(gb, gctx, model, loss, first, rules.Trainable)
	if err != nil {
		return nil, err
	}
	params, err := Params(vars, rules)
	if err != nil {
		return nil, err
	}
	if err := checkParams(ctx, comm, be, params); err != nil {
		return nil, err
	}
	oc := cfg.Optimizer
	if oc.ExternalGradients && cfg.CopyGradients {
		return nil, fmt.Errorf("gomlxinterop: GPUConfig.CopyGradients with Optimizer.ExternalGradients: the gradients are either copied or lent: %w", optimizer.ErrConfig)
	}
	oc.ExternalGradients = cfg.lendsGradients()
	opt, err := optimizer.New(ctx, comm, be, OptimizerParams(params), Initial(params), oc)
	if err != nil {
		return nil, err
	}
	t := &weightTrainer{dev: dev, opt: opt, params: params, keepDecoded: cfg.KeepDecoded}
	if err := t.setup(gb, gctx, model, loss); err != nil {
		return nil, errors.Join(err, t.Close())
	}
	return t, nil
}

// setup replaces the variables' values by placeholders, binds the weight
// inputs to distopt's gathered buffers and builds the graph.
func (t *weightTrainer) setup(gb backends.Backend, gctx *mlctx.Context, model train.ModelFn, loss train.LossFn) error {
	if err := t.dev.placeholders(t.params); err != nil {
		return err
	}
	views, err := t.bind()
	if err != nil {
		return err
	}
	opts := weightGradOptions{keepDecoded: t.keepDecoded}
	if t.opt.Config().ExternalGradients {
		opts.buckets = t.opt.Layout()
	}
	t.exec, err = newWeightGradExec(gb, gctx, model, loss, t.params, views, t.opt.Config().GradType, opts)
	if err != nil {
		return err
	}
	return t.dev.refresh()
}

// bind makes the graph's weight inputs from the parameters' gathered
// buffers and returns the parameter views.
func (t *weightTrainer) bind() ([]optimizer.ParamView, error) {
	var views []optimizer.ParamView
	for _, p := range t.params {
		v, err := t.opt.Param(p.Name)
		if err != nil {
			return nil, err
		}
		views = append(views, v)
		for _, in := range weightBuffers(v) {
			w, view, err := t.dev.input(in.buf, in.dt, in.dims)
			if err != nil {
				return nil, fmt.Errorf("gomlxinterop: weights of %q: %w", p.Name, err)
			}
			t.weights = append(t.weights, w)
			if view {
				t.timing.Views++
			} else {
				t.timing.Copies++
			}
		}
	}
	return views, nil
}

type weightBuffer struct {
	buf  buffer.Buffer
	dt   dtypes.DType
	dims []int
}

// weightBuffers lists the buffers of view v the graph reads, in the order
// of WeightGradExec's inputs.
func weightBuffers(v optimizer.ParamView) []weightBuffer {
	if v.HighPrecision {
		dt := dtypes.Float32
		if v.DType == buffer.BFloat16 {
			dt = dtypes.BFloat16
		}
		return []weightBuffer{{v.Data, dt, v.Shape}}
	}
	sdt, n := dtypes.Float32, v.ScaleInv.Len()/4
	if v.Recipe.Scaling == fp8.MXFP8 {
		sdt, n = dtypes.Uint8, v.ScaleInv.Len()
	}
	return []weightBuffer{{v.Data, dtypes.Uint8, v.Shape}, {v.ScaleInv, sdt, []int{n}}}
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
