package gpu

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// TestShardedGradients trains with sharded gradients
// (Config.ShardedGradients: the pool's buffers from the CUDA backend's
// Alloc) on one GPU with a one-rank NCCL communicator, for every recipe,
// with a skipped step, through StepAsync and Step, and compares it with the
// unsharded synchronous Step on the same GPU and with the CPU backend:
// step results, scalar state and every byte of state must be equal, with
// one micro-batch (TestShardedGradientsAccumulated has several).
func TestShardedGradients(t *testing.T) {
	r := ncclOne(t)
	shardedStep(t, r.Comm, r.Backend)
}

// TestShardedGradientsSingle is TestShardedGradients with
// collective/single on device memory.
func TestShardedGradientsSingle(t *testing.T) {
	b := open(t)
	copier := func(dst, src buffer.Buffer) error {
		d, s := dst.(buffer.DeviceBuffer), src.(buffer.DeviceBuffer)
		return b.s.CopyDtoD(ptrOf(d), ptrOf(s), min(d.Size, s.Size))
	}
	shardedStep(t, single.New(buffer.Device, copier), b)
}

// shardedStep is the body of TestShardedGradients on comm and be.
func shardedStep(t *testing.T, comm collective.Communicator, be *Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	params := optimizertest.AwkwardParams()
	const steps = 6
	for name, cfg := range stepConfigs() {
		for _, ov := range []optimizertest.Overlap{{MicroBatches: 1}, {MicroBatches: 1, Sync: true}} {
			t.Run(fmt.Sprintf("%s/%+v", name, ov), func(t *testing.T) {
				want, err := optimizertest.Train(ctx, comm, be, params, cfg, steps, oneRankGrad)
				if err != nil {
					t.Fatal(err)
				}
				sharded := cfg
				sharded.ShardedGradients = true
				got, err := optimizertest.TrainOverlapped(ctx, comm, be, params, sharded, steps, oneRankGrad, ov)
				if err != nil {
					t.Fatal(err)
				}
				cpu := train(t, single.New(buffer.Host, nil), cpu.New(2), cfg, steps, oneRankGrad)
				compareOverlap(t, want, got, cpu)
			})
		}
	}
}

// TestShardedGradientsAccumulated trains with sharded gradients over three
// micro-batches (each bucket's reduce-scatter per micro-batch, the shards
// accumulated by the backend: GradAccumulator) on one GPU with a one-rank
// NCCL communicator, for every recipe, with a skipped step, and compares
// it with the same training on the CPU backend: step results, scalar state
// and every byte of state must be equal. (Against unsharded accumulation
// the bits agree only where the sums are exact: the optimizer's tests.)
func TestShardedGradientsAccumulated(t *testing.T) {
	r := ncclOne(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	params := optimizertest.AwkwardParams()
	const steps = 6
	for name, cfg := range stepConfigs() {
		for _, ov := range []optimizertest.Overlap{{MicroBatches: 3, Shuffle: true}, {MicroBatches: 3}, {MicroBatches: 2, Sync: true}} {
			t.Run(fmt.Sprintf("%s/%+v", name, ov), func(t *testing.T) {
				sharded := cfg
				sharded.ShardedGradients = true
				if ov.Shuffle {
					// Gradients declared in a random order hold every
					// bucket's buffer at once: one buffer per bucket.
					l, err := optimizer.NewLayout(params, 1, cfg.Layout)
					if err != nil {
						t.Fatal(err)
					}
					sharded.GradBuffers = len(l.Buckets)
				}
				got, err := optimizertest.TrainOverlapped(ctx, r.Comm, r.Backend, params, sharded, steps, oneRankGrad, ov)
				if err != nil {
					t.Fatal(err)
				}
				cpu, err := optimizertest.TrainOverlapped(ctx, single.New(buffer.Host, nil), cpu.New(2), params, sharded, steps, oneRankGrad, ov)
				if err != nil {
					t.Fatal(err)
				}
				compareOverlap(t, cpu, got, cpu)
			})
		}
	}
}
