package optimizer_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distopt/distopt/collective"
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
	cfg.ShardedGradients, cfg.MicroBatches = true, micro
	o, err := optimizer.New(ctx, comm, optimizer.NewCPU(2), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
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
