package gomlxinterop_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/ranks"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/distopt/distopt/optimizer"
)

// trainGPUPath trains d ranks on GPUTrainer's path with the graph on the
// host (each rank its own simplego backend), rank r fed part r of each
// step's data.
func trainGPUPath(t *testing.T, d, steps int, cfg gomlxinterop.GPUConfig, task toy.Task, connect ranks.Connect) []rankRun {
	t.Helper()
	runs := make([]rankRun, d)
	for r := range runs {
		runs[r].backend = newBackend(t)
	}
	ranks.Run(t, d, func(ctx context.Context, r int) error {
		c, err := connect(ctx, r)
		if err != nil {
			return err
		}
		return errors.Join(gpuPathRank(ctx, &runs[r], c, steps, cfg, task), c.Close())
	})
	return runs
}

func gpuPathRank(ctx context.Context, run *rankRun, c ranks.Comm, steps int, cfg gomlxinterop.GPUConfig, task toy.Task) error {
	batch := func(s int) gomlxinterop.Batch {
		x, y := task.Batch(s, c.Rank(), perRank)
		return gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
	}
	cfg.Optimizer.Store = c.Agreer()
	tr, err := gomlxinterop.NewHostGPUPath(ctx, c.Communicator, run.backend, toy.Context(seed), task.Model(), task.Loss, batch(0), cfg)
	if err != nil {
		return err
	}
	defer tr.Close()
	lent, held := tr.Optimizer().Config().ExternalGradients, tr.Optimizer().Report().Get(optimizer.BufGrads)
	if lent == cfg.CopyGradients || (held == 0) != lent {
		return fmt.Errorf("CopyGradients %v: the optimizer's ExternalGradients is %v and it holds %d gradient bytes", cfg.CopyGradients, lent, held)
	}
	err = runSteps(run, steps, func(s int) ([]float32, optimizer.StepResult, error) {
		l, res, err := tr.Step(ctx, batch(s))
		return []float32{l}, res, err
	})
	if err != nil {
		return err
	}
	if run.pieces, err = tr.Optimizer().ReadPieces(); err != nil {
		return err
	}
	dec, err := tr.WeightGradExec().DecodeWeights(run.backend, tr.Weights())
	if err != nil {
		return err
	}
	run.weights = map[string][]float32{}
	for i, p := range tr.Params() {
		run.weights[p.Name] = tensors.MustCopyFlatData[float32](dec[i])
		dec[i].FinalizeAll()
	}
	return nil
}

// asOneRank gives the runs of d ranks the form of one rank's run with d
// micro-batches, for checkSame.
func asOneRank(runs []rankRun) rankRun {
	out := rankRun{weights: runs[0].weights}
	for s := range runs[0].losses {
		var ls []float32
		for _, r := range runs {
			ls = append(ls, r.losses[s][0])
		}
		out.losses = append(out.losses, ls)
	}
	for _, r := range runs {
		out.pieces = append(out.pieces, r.pieces...)
	}
	return out
}

// TestGPUPathRanks runs GPUTrainer's path on the CPU, on one rank and
// several: the graph reads distopt's gathered FP8 codes and scale_inv and
// lays its gradients out as distopt's buckets, which the step reads (one
// case copies them into distopt's own buffers instead, CopyGradients), as
// on the GPU, but each rank's graph runs
// on its own simplego backend (own client) and its bytes are copied, not
// viewed. d ranks over gRPC (store and communicator as under `distopt
// run`) and d ranks in-process must end bit-identical to one CPU Trainer
// fed the same batches as micro-batches (TestShardInvariance's oracle):
// every rank's losses, the decoded weights, and the masters and moments
// gathered over the ranks. With BF16 gradients the oracle does not apply
// (simplego truncates to BF16 in the graph, the CPU hand-over rounds), so
// the gRPC ranks must equal the in-process ranks.
func TestGPUPathRanks(t *testing.T) {
	const steps = 12
	data := toy.NewData(toy.Small, 11)
	for _, c := range []struct {
		task   toy.Task
		recipe fp8.Recipe
		grads  buffer.DType
		d      int
		copy   bool // GPUConfig.CopyGradients
	}{
		{data, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.Float32, 2, false},
		{data, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.Float32, 2, true},
		{data, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, buffer.BFloat16, 2, false},
		{data, fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.MXFP8}, buffer.Float32, 3, false},
		{toy.Tiny, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}, buffer.Float32, 2, false},
		{toy.Tiny, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.Float32, 1, false},
	} {
		t.Run(fmt.Sprintf("%T/%v/%v grads/d=%d/copy=%v", c.task, c.recipe, c.grads, c.d, c.copy), func(t *testing.T) {
			cfg := adamConfig()
			cfg.Optimizer.Recipe, cfg.Optimizer.GradType = c.recipe, c.grads
			cfg.Optimizer.WeightDecay, cfg.Optimizer.MaxGradNorm = 0.01, 1
			gcfg := gomlxinterop.GPUConfig{Optimizer: cfg.Optimizer, Rules: cfg.Rules, CopyGradients: c.copy}
			overGRPC := trainGPUPath(t, c.d, steps, gcfg, c.task, ranks.GRPC(t, c.d))
			inProcess := trainGPUPath(t, c.d, steps, gcfg, c.task, ranks.InProcess(c.d))
			if c.grads == buffer.BFloat16 {
				checkSame(t, overGRPC, asOneRank(inProcess), steps)
				return
			}
			ref := train(t, 1, c.d, steps, cfg, c.task)[0]
			checkSame(t, overGRPC, ref, steps)
			checkSame(t, inProcess, ref, steps)
		})
	}
}

// TestRanksDisagree starts two gRPC ranks that build different models and
// checks that both refuse to train, with optimizer.ErrMismatch naming the
// first parameter that differs: another width (the CPU Trainer), and
// another layout of a square kernel (GPUTrainer's path), which keeps every
// shape that distopt's own check compares.
func TestRanksDisagree(t *testing.T) {
	asIs := func(v *mlctx.Variable) gomlxinterop.Layout {
		if v.Scope() == "/hidden_1/dense" {
			return gomlxinterop.AsIs
		}
		return gomlxinterop.DefaultLayout(v)
	}
	for _, c := range []struct {
		name, param string
		gpuPath     bool
		shape       toy.Shape
		rules       gomlxinterop.Rules
	}{
		{"width", "/hidden_0/dense/weights", false, toy.Shape{In: 32, Hidden: 48, Layers: 2, Out: 8}, gomlxinterop.Rules{}},
		{"layout", "/hidden_1/dense/weights", true, toy.Small, gomlxinterop.Rules{Layout: asIs}},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := make([]error, 2)
			bes := []backends.Backend{newBackend(t), newBackend(t)}
			connect := ranks.GRPC(t, 2)
			ranks.Run(t, 2, func(ctx context.Context, r int) error {
				comm, err := connect(ctx, r)
				if err != nil {
					return err
				}
				defer comm.Close()
				shape, cfg := toy.Small, adamConfig()
				if r == 1 {
					shape, cfg.Rules = c.shape, c.rules
				}
				task := toy.NewData(shape, 11)
				x, y := task.Batch(0, r, perRank)
				b := gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
				var tr interface{ Close() error }
				if c.gpuPath {
					tr, errs[r] = gomlxinterop.NewHostGPUPath(ctx, comm.Communicator, bes[r], toy.Context(seed), task.Model(), task.Loss, b, gomlxinterop.GPUConfig{Optimizer: cfg.Optimizer, Rules: cfg.Rules})
				} else {
					tr, errs[r] = gomlxinterop.NewTrainer(ctx, comm.Communicator, bes[r], toy.Context(seed), task.Model(), task.Loss, b, cfg)
				}
				if errs[r] == nil {
					return errors.Join(errors.New("trainer made"), tr.Close())
				}
				return nil
			})
			for r, err := range errs {
				if !errors.Is(err, optimizer.ErrMismatch) || !strings.Contains(err.Error(), c.param) {
					t.Errorf("rank %d: %v, want optimizer.ErrMismatch naming %s", r, err, c.param)
				}
			}
			t.Log(errs[0])
		})
	}
}
