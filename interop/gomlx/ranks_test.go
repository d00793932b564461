package gomlxinterop_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/distopt/distopt/optimizer"
)

// rankComm is one rank's place in a job.
type rankComm struct {
	comm  collective.Communicator
	store optimizer.Agreer // the rendezvous store; nil in-process
	close func() error
}

// connectFunc gives rank r its communicator.
type connectFunc func(ctx context.Context, r int) (rankComm, error)

// inprocRanks connects d ranks through the in-process communicator.
func inprocRanks(d int) connectFunc {
	comms := inproc.Communicators(d)
	return func(_ context.Context, r int) (rankComm, error) {
		return rankComm{comm: comms[r], close: func() error { return nil }}, nil
	}
}

// grpcRanks connects d ranks as the processes of `distopt run` connect:
// each dials the rendezvous store (served here on loopback) and makes its
// gRPC communicator, which listens on a port of its own.
func grpcRanks(t *testing.T, d int) connectFunc {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rendezvous.Serve(lis)
	t.Cleanup(srv.Close)
	port := lis.Addr().(*net.TCPAddr).Port
	return func(ctx context.Context, r int) (rankComm, error) {
		store, err := rendezvous.Dial(ctx, rendezvous.Config{Rank: r, WorldSize: d, LocalRank: r, LocalWorldSize: d,
			MasterAddr: "127.0.0.1", MasterPort: port, RunID: t.Name()})
		if err != nil {
			return rankComm{}, err
		}
		comm, err := grpccomm.New(ctx, store, grpccomm.Config{})
		if err != nil {
			return rankComm{}, errors.Join(err, store.Close())
		}
		return rankComm{comm: comm, store: store, close: func() error { return errors.Join(comm.Close(), store.Close()) }}, nil
	}
}

// onRanks runs fn on d ranks connected by connect, each in a goroutine,
// under one context that the first error cancels, so that a failing rank
// never leaves the others waiting in a collective. The deadline only
// bounds a hang; it is far above the run's time.
func onRanks(t *testing.T, d int, connect connectFunc, fn func(ctx context.Context, r int, rc rankComm) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r := range d {
		wg.Go(func() {
			rc, err := connect(ctx, r)
			if err == nil {
				err = errors.Join(fn(ctx, r, rc), rc.close())
			}
			if err != nil {
				errs[r] = err
				cancel()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// trainGPUPath trains d ranks on GPUTrainer's path with the graph on the
// host (each rank its own simplego backend), rank r fed part r of each
// step's data.
func trainGPUPath(t *testing.T, d, steps int, cfg gomlxinterop.Config, task toy.Task, connect connectFunc) []rankRun {
	t.Helper()
	runs := make([]rankRun, d)
	for r := range runs {
		runs[r].backend = newBackend(t)
	}
	onRanks(t, d, connect, func(ctx context.Context, r int, rc rankComm) error {
		return gpuPathRank(ctx, &runs[r], rc, steps, cfg, task)
	})
	return runs
}

func gpuPathRank(ctx context.Context, run *rankRun, rc rankComm, steps int, cfg gomlxinterop.Config, task toy.Task) error {
	batch := func(s int) gomlxinterop.Batch {
		x, y := task.Batch(s, rc.comm.Rank(), perRank)
		return gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
	}
	cfg.Optimizer.Store = rc.store
	tr, err := gomlxinterop.NewHostGPUPath(ctx, rc.comm, run.backend, toy.Context(seed), task.Model(), task.Loss, batch(0),
		gomlxinterop.GPUConfig{Optimizer: cfg.Optimizer, Rules: cfg.Rules})
	if err != nil {
		return err
	}
	defer tr.Close()
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

// TestGPUPathRanks runs GPUTrainer's d > 1 path on the CPU: the graph
// reads distopt's gathered FP8 codes and scale_inv and hands its
// gradients over byte for byte, as on the GPU, but each rank's graph runs
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
	}{
		{data, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.Float32, 2},
		{data, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, buffer.BFloat16, 2},
		{data, fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.MXFP8}, buffer.Float32, 3},
		{toy.Tiny, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}, buffer.Float32, 2},
	} {
		t.Run(fmt.Sprintf("%T/%v/%v grads/d=%d", c.task, c.recipe, c.grads, c.d), func(t *testing.T) {
			cfg := adamConfig()
			cfg.Optimizer.Recipe, cfg.Optimizer.GradType = c.recipe, c.grads
			cfg.Optimizer.WeightDecay, cfg.Optimizer.MaxGradNorm = 0.01, 1
			overGRPC := trainGPUPath(t, c.d, steps, cfg, c.task, grpcRanks(t, c.d))
			inProcess := trainGPUPath(t, c.d, steps, cfg, c.task, inprocRanks(c.d))
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
			onRanks(t, 2, grpcRanks(t, 2), func(ctx context.Context, r int, rc rankComm) error {
				shape, cfg := toy.Small, adamConfig()
				if r == 1 {
					shape, cfg.Rules = c.shape, c.rules
				}
				task := toy.NewData(shape, 11)
				x, y := task.Batch(0, r, perRank)
				b := gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
				be := bes[r]
				var tr interface{ Close() error }
				if c.gpuPath {
					tr, errs[r] = gomlxinterop.NewHostGPUPath(ctx, rc.comm, be, toy.Context(seed), task.Model(), task.Loss, b, gomlxinterop.GPUConfig{Optimizer: cfg.Optimizer, Rules: cfg.Rules})
				} else {
					tr, errs[r] = gomlxinterop.NewTrainer(ctx, rc.comm, be, toy.Context(seed), task.Model(), task.Loss, b, cfg)
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
