package optimizer_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// exactGrad returns a GradFunc for world ranks whose sums are exact at
// every stage of both gradient paths: element i of parameter p at
// micro-batch step s on rank r is (c + 2r - (world-1))·2^-e, c uniform in
// [-16, 16] drawn from (s, p, i) and e in [8, 13] from (p, i), so that the rank
// offsets cancel and the average over ranks is exactly c·2^-e; sums of up
// to 4 micro-batches stay within 8 significant bits (exact in BFloat16).
// Rank 0's element 3 of "prime" is NaN at micro-batch step nanAt.
func exactGrad(world, nanAt int) optimizertest.GradFunc {
	return func(p optimizer.Param, s, rank int) []float32 {
		r := rand.New(rand.NewPCG(uint64(s), uint64(len(p.Name))))
		re := rand.New(rand.NewPCG(0, uint64(len(p.Name))))
		g := make([]float32, optimizertest.Numel(p.Shape))
		for i := range g {
			c := r.IntN(33) - 16
			g[i] = float32(c+2*rank-(world-1)) * float32(math.Ldexp(1, -8-re.IntN(6)))
		}
		if s == nanAt && p.Name == "prime" && rank == 0 {
			g[3] = float32(math.NaN())
		}
		return g
	}
}

// trainSharded is Train with sharded gradients: every step runs micro
// backward passes, each writing grad(p, step*micro+m, rank) (the
// micro-batch's own gradient, not a running sum) with SetGrad and declaring
// it ready, parameter after parameter in the backward order; StepAsync and
// WaitGathers when async, else Step.
func trainSharded(ctx context.Context, comm collective.Communicator, params []optimizer.Param, cfg optimizer.Config, steps, micro int, grad optimizertest.GradFunc, async bool) (optimizertest.Result, error) {
	return trainShardedOn(ctx, comm, cpu.New(2), params, cfg, steps, micro, grad, async)
}

// trainShardedOn is trainSharded on backend be.
func trainShardedOn(ctx context.Context, comm collective.Communicator, be backend.Backend, params []optimizer.Param, cfg optimizer.Config, steps, micro int, grad optimizertest.GradFunc, async bool) (optimizertest.Result, error) {
	cfg.ShardedGradients, cfg.MicroBatches = true, micro
	o, err := optimizer.New(ctx, comm, be, params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
	if err != nil {
		return optimizertest.Result{}, err
	}
	defer o.Close()
	var results []optimizer.StepResult
	for s := range steps {
		for m := range micro {
			for i := len(params) - 1; i >= 0; i-- {
				if err := o.SetGrad(params[i].Name, grad(params[i], s*micro+m, comm.Rank())); err != nil {
					return optimizertest.Result{}, fmt.Errorf("step %d: %w", s, err)
				}
				if err := o.GradReady(params[i].Name); err != nil {
					return optimizertest.Result{}, fmt.Errorf("step %d: %w", s, err)
				}
			}
		}
		step := o.Step
		if async {
			step = o.StepAsync
		}
		sr, err := step(ctx)
		if err != nil {
			return optimizertest.Result{}, fmt.Errorf("step %d: %w", s, err)
		}
		results = append(results, sr)
		if err := o.WaitGathers(ctx); err != nil {
			return optimizertest.Result{}, err
		}
	}
	res, err := optimizertest.Collect(o, params)
	res.Results = results
	return res, err
}

// TestShardedGradientsBitIdentical trains d in-process ranks (d = 1 to 4)
// with sharded gradients, for every configuration of
// optimizertest.Configs, with a skipped step (a NaN gradient), and
// compares every rank with the same ranks trained by the unsharded
// synchronous Step: step results, scalar state and every byte of masters,
// moments, FP8 data and scales must be equal.
//
// Without accumulation the gradients are arbitrary (RankGrad): both paths
// run the same reduce-scatter on the same bytes. With 3 micro-batches the
// unsharded path is fed the float32 sum of each rank's micro-batches
// (reduced once) and the sharded path reduces each micro-batch then adds
// the shards: these agree only where the sums are exact, so the gradients
// are exactGrad's, whose every partial sum and average is exact; the test
// states exactly that the two accumulation orders give the same bytes
// whenever no rounding occurs.
func TestShardedGradientsBitIdentical(t *testing.T) {
	params := optimizertest.AwkwardParams()
	worlds := []int{1, 2, 3, 4}
	if testing.Short() {
		worlds = []int{3}
	}
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			for _, d := range worlds {
				for _, micro := range []int{1, 3} {
					grad := nanGrad(micro)
					if micro > 1 {
						grad = exactGrad(d, overlapSkip*micro+1)
					}
					want := optimizertest.Run(t, d, overlapSteps, params, cfg, optimizertest.Accumulated(grad, micro))
					if !want[0].Results[overlapSkip].Skipped {
						t.Fatalf("step %d was not skipped", overlapSkip)
					}
					async := micro > 1
					got := optimizertest.RunRanks(t, d, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
						return trainSharded(ctx, comm, params, cfg, overlapSteps, micro, grad, async)
					})
					for r := range d {
						sameRun(t, fmt.Sprintf("d=%d micro=%d rank %d", d, micro, r), want[r], got[r])
					}
				}
			}
		})
	}
}

// bucketParams returns the names of the parameters of bucket b.
func bucketParams(o *optimizer.Optimizer, b int) []string {
	l := o.Layout()
	var names []string
	for _, i := range l.Buckets[b].Params {
		names = append(names, l.Params[i].Name)
	}
	return names
}

// TestShardedGradientsMisuse drives one rank with a pool of one buffer:
// a second bucket cannot be written while the first is not declared ready
// (ErrGradPool), a view ends when its bucket is declared ready (Valid), a
// parameter cannot be written again after its GradReady before its
// bucket's reduce-scatter starts (ErrGradReady), and a Step with no
// gradient declared is refused without breaking the optimizer.
func TestShardedGradientsMisuse(t *testing.T) {
	cfg := optimizertest.Configs()["sgd"]
	cfg.ShardedGradients, cfg.GradBuffers = true, 1
	o, _ := newOverlapped(t, cfg)
	ctx := context.Background()
	if _, err := o.Step(ctx); !errors.Is(err, optimizer.ErrGradReady) {
		t.Fatalf("Step with no gradient declared: %v, want ErrGradReady", err)
	}
	nb := len(o.Layout().Buckets)
	last, prev := bucketParams(o, nb-1), bucketParams(o, nb-2)
	if len(last) < 2 {
		t.Fatalf("last bucket has %d parameters, the test needs 2", len(last))
	}
	v, err := o.Grad(last[0])
	if err != nil || v.Valid() != nil {
		t.Fatalf("Grad(%q): %v, valid: %v", last[0], err, v.Valid())
	}
	if _, err := o.Grad(prev[0]); !errors.Is(err, optimizer.ErrGradPool) {
		t.Errorf("Grad(%q) with the only buffer lent: %v, want ErrGradPool", prev[0], err)
	}
	if err := o.SetGrad(prev[0], make([]float32, len(prev[0]))); !errors.Is(err, optimizer.ErrGradPool) {
		t.Errorf("SetGrad(%q) with the only buffer lent: %v, want ErrGradPool", prev[0], err)
	}
	if err := o.GradReady(last[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Grad(last[0]); !errors.Is(err, optimizer.ErrGradReady) {
		t.Errorf("Grad(%q) after its GradReady, bucket incomplete: %v, want ErrGradReady", last[0], err)
	}
	if v.Valid() != nil {
		t.Errorf("view of %q ended before its bucket was complete: %v", last[0], v.Valid())
	}
	for _, name := range last[1:] {
		if err := o.GradReady(name); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Valid(); !errors.Is(err, optimizer.ErrGradPool) {
		t.Errorf("view of %q after its bucket's GradReady: %v, want ErrGradPool", last[0], err)
	}
	for b := nb - 2; b >= 0; b-- { // the buffer comes back as each bucket starts
		for _, name := range bucketParams(o, b) {
			if _, err := o.Grad(name); err != nil {
				t.Fatalf("Grad(%q) once the buffer was reduced: %v", name, err)
			}
			if err := o.GradReady(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := o.Step(ctx); err != nil {
		t.Fatalf("Step after the refused calls: %v", err)
	}
}

// noAccumulate hides the CPU backend's AccumulateGrad.
type noAccumulate struct{ backend.Backend }

// TestShardedGradientsConfig checks the refused configurations: GradBuffers
// without ShardedGradients or negative, and accumulation on a backend that
// cannot add gradient shards.
func TestShardedGradientsConfig(t *testing.T) {
	params := optimizertest.AwkwardParams()
	init := optimizer.FromMap(optimizertest.InitWeights(params, 1))
	for _, c := range []struct {
		cfg optimizer.Config
		be  backend.Backend
	}{
		{optimizer.Config{GradBuffers: 2}, cpu.New(1)},
		{optimizer.Config{ShardedGradients: true, GradBuffers: -1}, cpu.New(1)},
		{optimizer.Config{ShardedGradients: true, MicroBatches: 2}, noAccumulate{cpu.New(1)}},
	} {
		c.cfg.Groups = optimizertest.Groups()
		comm := inproc.Communicators(1)[0]
		_, err := optimizer.New(context.Background(), comm, c.be, params, init, c.cfg)
		if !errors.Is(err, optimizer.ErrConfig) || !strings.Contains(err.Error(), "GradBuffers") && !strings.Contains(err.Error(), "GradAccumulator") {
			t.Errorf("%+v: %v, want ErrConfig naming GradBuffers or GradAccumulator", c.cfg, err)
		}
		comm.Close()
	}
	comm := inproc.Communicators(1)[0]
	defer comm.Close()
	o, err := optimizer.New(context.Background(), comm, noAccumulate{cpu.New(1)}, params, init, optimizer.Config{ShardedGradients: true, Groups: optimizertest.Groups()})
	if err != nil {
		t.Fatalf("one micro-batch needs no accumulation: %v", err)
	}
	o.Close()
}

// TestShardedGradientsWireBytes counts the reduce-scatters of a step with
// sharded gradients and 3 micro-batches: one per bucket and micro-batch, in
// the backward order micro-batch after micro-batch, each of the bucket's
// full gradient: the wire bytes of the unsharded path times MicroBatches.
func TestShardedGradientsWireBytes(t *testing.T) {
	const micro = 3
	cfg := optimizertest.Configs()["sgd"]
	cfg.ShardedGradients, cfg.MicroBatches = true, micro
	o, rec := newOverlapped(t, cfg)
	l := o.Layout()
	for range micro {
		for i := len(l.Params) - 1; i >= 0; i-- {
			if err := o.GradReady(l.Params[i].Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := o.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs := rec.reduceScatters()
	nb := len(l.Buckets)
	if len(rs) != micro*nb {
		t.Fatalf("%d reduce-scatters, want %d buckets x %d micro-batches", len(rs), nb, micro)
	}
	for k, op := range rs {
		b := nb - 1 - k%nb
		if want := 2 * l.Buckets[b].Size; op.Src.Len() != want {
			t.Errorf("reduce-scatter %d: %d bytes, want bucket %d's %d", k, op.Src.Len(), b, want)
		}
	}
}

// TestShardedGradientsTrainOverlapped drives sharded gradients with
// optimizertest.TrainOverlapped (one micro-batch, as optimizer/gpu's test
// does on the CUDA backend) on 2 ranks and compares with the unsharded
// synchronous Step, bit for bit.
func TestShardedGradientsTrainOverlapped(t *testing.T) {
	params := optimizertest.AwkwardParams()
	cfg := optimizertest.Configs()["E4M3 Block128x128(margin=0, pow2=false)"]
	grad := nanGrad(1)
	want := optimizertest.Run(t, 2, overlapSteps, params, cfg, grad)
	cfg.ShardedGradients = true
	got := optimizertest.RunRanks(t, 2, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
		return optimizertest.TrainOverlapped(ctx, comm, cpu.New(2), params, cfg, overlapSteps, grad, optimizertest.Overlap{MicroBatches: 1})
	})
	for r := range 2 {
		sameRun(t, fmt.Sprintf("rank %d", r), want[r], got[r])
	}
}

// TestShardedGradientsConcurrent writes and declares the gradients from one
// goroutine per parameter (SetGrad then GradReady), as parallel backward
// hooks would, for two micro-batches on 2 ranks, with a pool buffer per
// bucket: the state must equal the unsharded synchronous Step's on the
// accumulated (exact) gradients, and the race detector stay quiet.
func TestShardedGradientsConcurrent(t *testing.T) {
	const micro, d = 2, 2
	params := optimizertest.AwkwardParams()
	cfg := optimizertest.Configs()["E4M3 TensorCurrent(margin=0, pow2=false)"]
	grad := exactGrad(d, overlapSkip*micro)
	want := optimizertest.Run(t, d, overlapSteps, params, cfg, optimizertest.Accumulated(grad, micro))
	cfg.ShardedGradients, cfg.MicroBatches = true, micro
	got := optimizertest.RunRanks(t, d, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
		l, err := optimizer.NewLayout(params, d, cfg.Layout)
		if err != nil {
			return optimizertest.Result{}, err
		}
		cfg.GradBuffers = len(l.Buckets)
		o, err := optimizer.New(ctx, comm, cpu.New(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
		if err != nil {
			return optimizertest.Result{}, err
		}
		defer o.Close()
		var results []optimizer.StepResult
		for s := range overlapSteps {
			for m := range micro {
				errs := make([]error, len(params))
				var wg sync.WaitGroup
				for i, p := range params {
					wg.Go(func() {
						errs[i] = errors.Join(o.SetGrad(p.Name, grad(p, s*micro+m, comm.Rank())), o.GradReady(p.Name))
					})
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					return optimizertest.Result{}, err
				}
			}
			sr, err := o.Step(ctx)
			if err != nil {
				return optimizertest.Result{}, err
			}
			results = append(results, sr)
		}
		res, err := optimizertest.Collect(o, params)
		res.Results = results
		return res, err
	})
	for r := range d {
		sameRun(t, fmt.Sprintf("rank %d", r), want[r], got[r])
	}
}
