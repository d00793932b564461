package gpu

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
	"github.com/distopt/distopt/shard"
)

// TestFP8Gradients trains one rank on the GPU backend through a device
// communicator wrapped by FP8Gradients (the GPU codec) and on the CPU
// backend through fp8grad.New (the CPU codec), for every recipe, with
// E4M3 and error feedback and with E5M2 in blocks of 32, the NaN of step 4
// included: every byte of state and the skipped steps must be equal.
// Skips without a GPU.
func TestFP8Gradients(t *testing.T) {
	b := open(t)
	for _, fc := range []fp8grad.Config{{ErrorFeedback: true}, {Format: fp8.E5M2, Block: 32}} {
		for name, cfg := range stepConfigs() {
			t.Run(fmt.Sprintf("%v/block=%d/ef=%t/%s", fc.Format, fc.Block, fc.ErrorFeedback, name), func(t *testing.T) {
				dev, err := FP8Gradients(b, deviceSingle(b), fc)
				if err != nil {
					t.Fatal(err)
				}
				defer dev.Close()
				host, err := fp8grad.New(single.New(buffer.Host, nil), fc)
				if err != nil {
					t.Fatal(err)
				}
				defer host.Close()
				const steps = 6
				want := train(t, host, cpu.New(2), cfg, steps, oneRankGrad)
				got := train(t, dev, b, cfg, steps, oneRankGrad)
				checkFP8Run(t, "gpu", want, got)
			})
		}
	}
}

// TestFP8GradientsSharded trains one rank on the GPU with sharded
// gradients, four buckets of one size sharing the pool's two buffers, and
// FP8 gradients with error feedback (FP8Gradients), and on the CPU without
// sharded gradients (fp8grad.New): the residuals follow the buckets (the
// op's Tag), so every byte of state must be equal. Skips without a GPU.
func TestFP8GradientsSharded(t *testing.T) {
	b := open(t)
	fc := fp8grad.Config{ErrorFeedback: true, Block: 32}
	dev, err := FP8Gradients(b, deviceSingle(b), fc)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	host, err := fp8grad.New(single.New(buffer.Host, nil), fc)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var params []optimizer.Param
	for i := range 4 {
		params = append(params, optimizer.Param{Name: fmt.Sprintf("w%d", i), Shape: []int{16, 32}})
	}
	cfg := optimizer.Config{LR: optimizer.Constant(1e-2), Layout: shard.Options{BucketElements: 512}}
	want, err := optimizertest.Train(ctx, host, cpu.New(2), params, cfg, 5, oneRankGrad)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ShardedGradients = true
	got, err := optimizertest.TrainOverlapped(ctx, dev, b, params, cfg, 5, oneRankGrad, optimizertest.Overlap{MicroBatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range optimizertest.Diff(want, got) {
		t.Errorf("gpu, sharded gradients, against cpu: %s", d)
	}
}

// deviceSingle is a one-rank communicator on b's device memory, copying on
// its stream.
func deviceSingle(b *Backend) collective.Communicator {
	return single.New(buffer.Device, func(dst, src buffer.Buffer) error {
		d, s := dst.(buffer.DeviceBuffer), src.(buffer.DeviceBuffer)
		return b.s.CopyDtoD(ptrOf(d), ptrOf(s), min(d.Size, s.Size))
	})
}

// checkFP8Run compares the run got (named what) with the CPU run want: the
// same skipped steps (step 4 among them) and every byte of state.
func checkFP8Run(t *testing.T, what string, want, got optimizertest.Result) {
	t.Helper()
	if !got.Skipped()[4] || fmt.Sprint(got.Skipped()) != fmt.Sprint(want.Skipped()) {
		t.Errorf("%s: skipped steps %v, cpu %v (want step 4 skipped)", what, got.Skipped(), want.Skipped())
	}
	for _, d := range optimizertest.Diff(want, got) {
		t.Errorf("%s against cpu: %s", what, d)
	}
}

// TestRankFP8Gradients wraps a one-rank NCCL communicator of Setup with
// Rank.FP8Gradients: a second wrap is refused, and Close (the cleanup of
// ncclOne) closes the wrapper and through it the NCCL communicator. Skips
// without a GPU or NCCL.
func TestRankFP8Gradients(t *testing.T) {
	r := ncclOne(t)
	c, err := r.FP8Gradients(fp8grad.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Size() != 1 || c.Memory() != buffer.Device {
		t.Fatalf("wrapper of size %d on %s memory", c.Size(), c.Memory())
	}
	if _, err := r.FP8Gradients(fp8grad.Config{}); !errors.Is(err, fp8grad.ErrConfig) {
		t.Fatalf("second wrap: %v, want fp8grad.ErrConfig", err)
	}
}

// TestFP8GradientsRefused: FP8Gradients without a backend is refused with
// fp8grad.ErrConfig (no GPU needed).
func TestFP8GradientsRefused(t *testing.T) {
	if _, err := FP8Gradients(nil, single.New(buffer.Device, nil), fp8grad.Config{}); !errors.Is(err, fp8grad.ErrConfig) {
		t.Errorf("no backend: %v, want fp8grad.ErrConfig", err)
	}
}
