package optimizer_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// overlapSteps is the number of steps of the overlap tests; step
// overlapSkip has a NaN gradient (skipped on every rank).
const (
	overlapSteps = 4
	overlapSkip  = 2
)

// overlapVariants are the ways the overlap tests drive the pipeline.
var overlapVariants = []optimizertest.Overlap{
	{MicroBatches: 1},
	{MicroBatches: 3, Shuffle: true},
	{MicroBatches: 2, Shuffle: true, Sync: true},
}

// nanGrad is RankGrad with a NaN in the last micro-batch of step
// overlapSkip, for steps of micro micro-batches.
func nanGrad(micro int) optimizertest.GradFunc {
	return func(p optimizer.Param, s, rank int) []float32 {
		g := optimizertest.RankGrad(p, s, rank)
		if s == overlapSkip*micro+micro-1 && p.Name == "prime" && rank == 0 {
			g[7] = float32(math.NaN())
		}
		return g
	}
}

// sameRun fails t unless got took the same steps as want (results without
// timings), holds the same scalar state (step count, loss scaler, amax
// histories) and, bit for bit, the same masters, moments, FP8 bytes,
// scales and high-precision weights.
func sameRun(t *testing.T, what string, want, got optimizertest.Result) {
	t.Helper()
	if len(got.Results) != len(want.Results) {
		t.Fatalf("%s: %d step results, want %d", what, len(got.Results), len(want.Results))
	}
	for i := range got.Results {
		g, w := got.Results[i], want.Results[i]
		g.Timings, w.Timings = optimizer.Timings{}, optimizer.Timings{}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: step %d: %+v, synchronous %+v", what, i, g, w)
		}
	}
	if !reflect.DeepEqual(got.Scalars, want.Scalars) {
		t.Fatalf("%s: scalar state %+v, synchronous %+v", what, got.Scalars, want.Scalars)
	}
	if diffs := optimizertest.Diff(want, got); diffs != nil {
		t.Fatalf("%s: %s", what, diffs[0])
	}
}

// TestOverlapBitIdentical trains d in-process ranks (d = 2, 3, 4) through
// the overlapped pipeline (GradReady, gradient accumulation, StepAsync,
// WaitParam), for every configuration of optimizertest.Configs, with a
// skipped step, and compares every rank with the same ranks trained by the
// synchronous Step on the accumulated gradients: results, scalar state
// (loss scaler, amax histories) and every byte of state must be equal.
// The shuffled variants declare gradients ready in a different order on
// every rank: the reduce-scatters must still meet.
func TestOverlapBitIdentical(t *testing.T) {
	params := optimizertest.AwkwardParams()
	worlds, variants := []int{2, 3, 4}, overlapVariants
	if testing.Short() {
		worlds, variants = []int{3}, overlapVariants[1:2]
	}
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			for _, d := range worlds {
				for _, ov := range variants {
					micro := max(1, ov.MicroBatches)
					grad := nanGrad(micro)
					want := optimizertest.Run(t, d, overlapSteps, params, cfg, optimizertest.Accumulated(grad, micro))
					got := optimizertest.RunRanks(t, d, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
						return optimizertest.TrainOverlapped(ctx, comm, cpu.New(2), params, cfg, overlapSteps, grad, ov)
					})
					if !want[0].Results[overlapSkip].Skipped {
						t.Fatalf("step %d was not skipped", overlapSkip)
					}
					for r := range d {
						sameRun(t, fmt.Sprintf("d=%d %+v rank %d", d, ov, r), want[r], got[r])
					}
				}
			}
		})
	}
}
