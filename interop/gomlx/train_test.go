package gomlxinterop_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/distopt/distopt/optimizer"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

const (
	seed    = 7
	perRank = 16
	lr      = 3e-3
	eps     = 1e-7
)

func newBackend(t testing.TB) backends.Backend {
	t.Helper()
	be, err := toy.Backend()
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// adamConfig is distopt's AdamW set up as GoMLX's Adam: same learning rate,
// betas and epsilon, no weight decay, no clipping.
func adamConfig() gomlxinterop.Config {
	return gomlxinterop.Config{Optimizer: optimizer.Config{LR: optimizer.Constant(lr), Eps: eps}}
}

// rankRun is what one rank holds after training.
type rankRun struct {
	losses  [][]float32 // per step, the loss of each micro-batch
	pieces  []optimizer.PieceState
	weights map[string][]float32 // the variables, as GoMLX holds them
	tr      *gomlxinterop.Trainer
	backend backends.Backend
}

// train runs d in-process ranks for steps steps, each rank fed micro
// micro-batches per step: rank r's micro-batch k of step s is part
// r*micro+k. The trainers are closed when the test ends.
func train(t *testing.T, d, micro, steps int, cfg gomlxinterop.Config, task toy.Task) []rankRun {
	t.Helper()
	comms := inproc.Communicators(d)
	runs := make([]rankRun, d)
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r := range d {
		runs[r].backend = newBackend(t)
		wg.Go(func() { errs[r] = trainRank(&runs[r], comms[r], micro, steps, cfg, task) })
	}
	wg.Wait()
	for r := range runs {
		if runs[r].tr != nil {
			t.Cleanup(func() { runs[r].tr.Close() })
		}
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return runs
}

func trainRank(run *rankRun, comm collective.Communicator, micro, steps int, cfg gomlxinterop.Config, task toy.Task) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	batches := func(s int) []gomlxinterop.Batch {
		var out []gomlxinterop.Batch
		for k := range micro {
			x, y := task.Batch(s, comm.Rank()*micro+k, perRank)
			out = append(out, gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}})
		}
		return out
	}
	tr, err := gomlxinterop.NewTrainer(ctx, comm, run.backend, toy.Context(seed), task.Model(), task.Loss, batches(0)[0], cfg)
	if err != nil {
		return err
	}
	run.tr = tr
	err = runSteps(run, steps, func(s int) ([]float32, optimizer.StepResult, error) { return tr.StepMicro(ctx, batches(s)) })
	if err != nil {
		return err
	}
	if run.pieces, err = tr.Optimizer().ReadPieces(); err != nil {
		return err
	}
	run.weights = map[string][]float32{}
	for _, p := range tr.Params() {
		run.weights[p.Name] = tensors.MustCopyFlatData[float32](p.Var.MustValue())
	}
	return nil
}

// runSteps takes n steps with step and keeps each step's losses in run; a
// skipped step is an error.
func runSteps(run *rankRun, n int, step func(s int) ([]float32, optimizer.StepResult, error)) error {
	for s := range n {
		l, res, err := step(s)
		if err != nil {
			return err
		}
		if res.Skipped {
			return fmt.Errorf("step %d skipped: %s", s, res.Reason)
		}
		run.losses = append(run.losses, l)
	}
	return nil
}

// meanLoss returns the mean over ranks and micro-batches of step s's loss.
func meanLoss(runs []rankRun, s int) float64 {
	sum, n := 0.0, 0
	for _, r := range runs {
		for _, l := range r.losses[s] {
			sum += float64(l)
			n++
		}
	}
	return sum / float64(n)
}

// TestTrainMatchesGoMLXAdam trains on 3 in-process ranks with FP8 (E4M3,
// current scaling) weights and checks that the held-out loss at the end
// lies within 2% of GoMLX's own Adam trained on the same batches (the three
// ranks' batches stacked) from the same initial variables: the MLP, and a
// one-block transformer learning to reverse sequences (multi-head
// attention, layer norms, embeddings).
func TestTrainMatchesGoMLXAdam(t *testing.T) {
	const d = 3
	for _, c := range []struct {
		name  string
		task  toy.Task
		steps int
	}{{"mlp", toy.NewData(toy.Small, 11), 200}, {"transformer", toy.Tiny, 150}} {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.name != "mlp" {
				t.Skip("the transformer trains for seconds (minutes under -race)")
			}
			runs := train(t, d, 1, c.steps, adamConfig(), c.task)
			be := newBackend(t)
			adamLoss, adamCtx, err := toy.Adam(be, c.task, seed, c.steps, d, perRank, lr, eps)
			if err != nil {
				t.Fatal(err)
			}
			if first := meanLoss(runs, 0); math.Abs(first-float64(adamLoss[0])) > 0.05*float64(adamLoss[0]) {
				t.Fatalf("first loss %.5f, GoMLX Adam's %.5f: the runs do not start from the same model", first, adamLoss[0])
			}
			x, y := toy.Concat(c.task, 1<<20, 8, 64) // held out: no training step uses step 2^20
			got, err := toy.Eval(runs[0].backend, c.task, runs[0].tr.GradExec().Context(), x, y)
			if err != nil {
				t.Fatal(err)
			}
			x, y = toy.Concat(c.task, 1<<20, 8, 64)
			want, err := toy.Eval(be, c.task, adamCtx, x, y)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("held-out loss after %d steps: distopt (%d ranks, FP8) %.5f, GoMLX Adam %.5f (%+.2f%%); initial %.5f; last training loss %.5f vs %.5f",
				c.steps, d, got, want, 100*(got/want-1), adamLoss[0], meanLoss(runs, c.steps-1), adamLoss[c.steps-1])
			if got > 0.5*adamLoss[0] {
				t.Errorf("distopt did not train: held-out loss %.5f, initial %.5f", got, adamLoss[0])
			}
			if math.Abs(float64(got/want-1)) > 0.02 {
				t.Errorf("held-out loss %.5f is not within 2%% of GoMLX Adam's %.5f", got, want)
			}
		})
	}
}

// TestShardInvariance checks that d ranks fed one batch each end with the
// distopt state (masters and moments, gathered over the ranks), the GoMLX
// variables and the per-batch losses bit-identical to one rank fed the same
// d batches as micro-batches (the MLP and the transformer), for the
// per-tensor, a block and the tile recipe, with
// BF16 and FP32 gradients (FP32 sums depend on their order, so the
// micro-batches must be averaged in rank order, as the communicator does).
func TestShardInvariance(t *testing.T) {
	const steps = 20
	data := toy.NewData(toy.Small, 11)
	for _, c := range []struct {
		task   toy.Task
		recipe fp8.Recipe
		grads  buffer.DType
		worlds []int
	}{
		{data, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}, buffer.BFloat16, []int{2, 3}},
		{data, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}, buffer.Float32, []int{2, 3}},
		{toy.Tiny, fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block128x128}, buffer.Float32, []int{3}},
	} {
		for _, d := range c.worlds {
			t.Run(fmt.Sprintf("%T/%v/%v grads/d=%d", c.task, c.recipe, c.grads, d), func(t *testing.T) {
				cfg := adamConfig()
				cfg.Optimizer.Recipe, cfg.Optimizer.GradType = c.recipe, c.grads
				cfg.Optimizer.WeightDecay, cfg.Optimizer.MaxGradNorm = 0.01, 1
				got := train(t, d, 1, steps, cfg, c.task)
				ref := train(t, 1, d, steps, cfg, c.task)[0]
				checkSame(t, got, ref, steps)
			})
		}
	}
}

// checkSame fails t unless the ranks of got hold, bit for bit, what ref
// (one rank fed their batches as micro-batches) holds after steps steps:
// each rank's losses, the variables, and the masters and moments gathered
// over the ranks.
func checkSame(t *testing.T, got []rankRun, ref rankRun, steps int) {
	t.Helper()
	for r, run := range got {
		for s := range steps {
			if math.Float32bits(run.losses[s][0]) != math.Float32bits(ref.losses[s][r]) {
				t.Fatalf("rank %d step %d: loss %v, single rank %v", r, s, run.losses[s][0], ref.losses[s][r])
			}
		}
		if len(run.weights) != len(ref.weights) {
			t.Fatalf("rank %d: %d variables, single rank %d", r, len(run.weights), len(ref.weights))
		}
		for name, w := range run.weights {
			if k := firstDiff(w, ref.weights[name]); k >= 0 {
				t.Fatalf("rank %d: variable %s[%d] = %v, single rank %v", r, name, k, w[k], ref.weights[name][k])
			}
		}
	}
	var pieces []optimizer.PieceState
	for _, run := range got {
		pieces = append(pieces, run.pieces...)
	}
	want := fullState(ref.pieces)
	st := fullState(pieces)
	if len(st) != len(want) {
		t.Fatalf("state of %d parameters, single rank %d", len(st), len(want))
	}
	for name, st := range st {
		for i, what := range []string{"master", "m", "v"} {
			if k := firstDiff(st[i], want[name][i]); k >= 0 {
				t.Fatalf("%s of %s differs at %d: %v, single rank %v", what, name, k, st[i][k], want[name][i][k])
			}
		}
	}
}

// fullState joins pieces into each parameter's full master, m and v.
func fullState(pieces []optimizer.PieceState) map[string][3][]float32 {
	out := map[string][3][]float32{}
	for _, p := range pieces {
		st := out[p.Param]
		for i, x := range [][]float32{p.Master, p.M, p.V} {
			if need := p.Offset + len(x); len(st[i]) < need {
				st[i] = append(st[i], make([]float32, need-len(st[i]))...)
			}
			copy(st[i][p.Offset:], x)
		}
		out[p.Param] = st
	}
	return out
}

// firstDiff returns the first index where a and b differ in bits, or -1.
func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for k := range a {
		if math.Float32bits(a[k]) != math.Float32bits(b[k]) {
			return k
		}
	}
	return -1
}
