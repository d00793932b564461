package gomlxinterop

import (
	"context"
	"fmt"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// Config configures a Trainer.
type Config struct {
	// Optimizer is distopt's configuration. LossScaler is not supported
	// (GoMLX trains in float32 here, and the graph does not scale its loss).
	Optimizer optimizer.Config
	// Rules map the variables to parameters; nil fields take the defaults.
	Rules Rules
	// Backend runs the optimizer step. Default: cpu.New(0).
	Backend backend.Backend
}

// Batch is one batch of inputs and labels.
type Batch struct {
	Inputs, Labels []*tensors.Tensor
}

// Trainer is one data-parallel rank training a GoMLX model with distopt:
// GoMLX computes loss and gradients, distopt averages the gradients over
// the ranks, updates its shard and gathers the FP8 weights, which go back
// into the GoMLX variables. Every rank makes its own Trainer on its own
// context and communicator, and all call Step together. Not safe for
// concurrent use.
type Trainer struct {
	exec   *GradExec
	params []Param
	opt    *optimizer.Optimizer
	hand   *HandOver
	shared bool
}

// NewTrainer builds the gradient graph of model and loss for batches shaped
// like first (which creates and initialises the variables of gctx), maps
// the variables to parameters under cfg.Rules, makes the optimizer on comm
// with the variables' values as initial values (each rank's shard comes
// from its own context; give all ranks the same seed), and writes the
// gathered weights back into the variables, so that every rank starts
// from the same model. Ranks whose parameters differ (names, shapes,
// layouts, rules) are refused with optimizer.ErrMismatch, naming the first.
func NewTrainer(ctx context.Context, comm collective.Communicator, backend backends.Backend, gctx *mlctx.Context, model train.ModelFn, loss train.LossFn, first Batch, cfg Config) (*Trainer, error) {
	if cfg.Optimizer.LossScaler != nil {
		return nil, fmt.Errorf("gomlxinterop: loss scaling is not supported by Trainer: %w", optimizer.ErrConfig)
	}
	rules := cfg.Rules.withDefaults()
	exec, err := NewGradExec(backend, gctx, model, loss, rules.Trainable)
	if err != nil {
		return nil, err
	}
	if err := exec.Build(first.Inputs, first.Labels); err != nil {
		return nil, err
	}
	params, err := Params(exec.Vars(), rules)
	if err != nil {
		return nil, err
	}
	be := cfg.Backend
	if be == nil {
		be = cpu.New(0)
	}
	if err := checkParams(ctx, comm, be, params); err != nil {
		return nil, err
	}
	opt, err := optimizer.New(ctx, comm, be, OptimizerParams(params), Initial(params), cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	t := &Trainer{exec: exec, params: params, opt: opt, hand: NewHandOver(backend, opt, params)}
	if t.shared, err = t.hand.ShareVariables(); err == nil {
		err = t.hand.Weights()
	}
	if err != nil {
		opt.Close()
		return nil, err
	}
	return t, nil
}

// Step trains one step on this rank's batch: forward and backward in GoMLX,
// the gradients handed to distopt, distopt's step (collective: all ranks
// call it together), and the gathered weights written into the variables.
// It returns this rank's loss (before the update) and the step's result.
func (t *Trainer) Step(ctx context.Context, b Batch) (float32, optimizer.StepResult, error) {
	losses, res, err := t.StepMicro(ctx, []Batch{b})
	if err != nil {
		return 0, res, err
	}
	return losses[0], res, nil
}

// StepMicro is Step with gradient accumulation: it runs forward and
// backward on every micro-batch and steps once with their average, taken
// as the communicator averages ranks (see HandOver.MeanGrads), so that one
// rank fed d micro-batches takes the same step as d ranks fed one each. It
// returns the loss of each micro-batch.
func (t *Trainer) StepMicro(ctx context.Context, micro []Batch) ([]float32, optimizer.StepResult, error) {
	losses := make([]float32, len(micro))
	grads := make([][]*tensors.Tensor, len(micro))
	defer func() {
		for _, gs := range grads {
			for _, g := range gs {
				g.FinalizeAll()
			}
		}
	}()
	for k, b := range micro {
		l, gs, err := t.exec.Exec(b.Inputs, b.Labels)
		if err != nil {
			return nil, optimizer.StepResult{}, err
		}
		grads[k] = gs
		losses[k] = tensors.ToScalar[float32](l)
		l.FinalizeAll()
	}
	if err := t.hand.MeanGrads(grads); err != nil {
		return nil, optimizer.StepResult{}, err
	}
	res, err := t.opt.Step(ctx)
	if err != nil {
		return nil, res, err
	}
	return losses, res, t.hand.Weights()
}

// Params returns the parameters, in gradient order.
func (t *Trainer) Params() []Param { return t.params }

// Optimizer returns the rank's optimizer (for checkpoints, reports, state).
func (t *Trainer) Optimizer() *optimizer.Optimizer { return t.opt }

// HandOver returns the hand-over between the variables and the optimizer.
func (t *Trainer) HandOver() *HandOver { return t.hand }

// GradExec returns the executor of the forward and backward pass.
func (t *Trainer) GradExec() *GradExec { return t.exec }

// Shared reports whether the variables share their memory with the GoMLX
// backend, so that the weights are written where the graph reads them.
func (t *Trainer) Shared() bool { return t.shared }

// Close releases the optimizer's buffers. The variables keep the last
// gathered weights.
func (t *Trainer) Close() error { return t.opt.Close() }
