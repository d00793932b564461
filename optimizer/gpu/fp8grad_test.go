package gpu

import (
	"errors"
	"fmt"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// TestFP8Gradients trains one rank on the GPU backend through a device
// communicator wrapped by FP8Gradients (the GPU codec) and on the CPU
// backend through fp8grad.New (the CPU codec), for every recipe, with
// E4M3 and error feedback and with E5M2 in blocks of 32, the NaN of step 4
// included: every byte of state and the skipped steps must be equal.
// Skips without a GPU.
func TestFP8Gradients(t *testing.T) {
	b := open(t)
	copier := func(dst, src collective.Buffer) error {
		d, s := dst.(collective.DeviceBuffer), src.(collective.DeviceBuffer)
		return b.Stream().CopyDtoD(ptrOf(d), ptrOf(s), min(d.Size, s.Size))
	}
	for _, fc := range []fp8grad.Config{{ErrorFeedback: true}, {Format: fp8.E5M2, Block: 32}} {
		for name, cfg := range stepConfigs() {
			t.Run(fmt.Sprintf("%v/block=%d/ef=%t/%s", fc.Format, fc.Block, fc.ErrorFeedback, name), func(t *testing.T) {
				dev, err := FP8Gradients(b, single.New(collective.Device, copier), fc)
				if err != nil {
					t.Fatal(err)
				}
				defer dev.Close()
				host, err := fp8grad.New(single.New(collective.Host, nil), fc)
				if err != nil {
					t.Fatal(err)
				}
				defer host.Close()
				const steps = 6
				got := train(t, dev, b, cfg, steps, oneRankGrad)
				want := train(t, host, optimizer.NewCPU(2), cfg, steps, oneRankGrad)
				if got.Skipped()[4] != true || fmt.Sprint(got.Skipped()) != fmt.Sprint(want.Skipped()) {
					t.Errorf("skipped steps: gpu %v, cpu %v (want step 4 skipped)", got.Skipped(), want.Skipped())
				}
				for _, d := range optimizertest.Diff(want, got) {
					t.Errorf("gpu against cpu: %s", d)
				}
			})
		}
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
	if c.Size() != 1 || c.Memory() != collective.Device {
		t.Fatalf("wrapper of size %d on %s memory", c.Size(), c.Memory())
	}
	if _, err := r.FP8Gradients(fp8grad.Config{}); !errors.Is(err, fp8grad.ErrConfig) {
		t.Fatalf("second wrap: %v, want fp8grad.ErrConfig", err)
	}
}

// TestFP8GradientsRefused: FP8Gradients without a backend is refused with
// fp8grad.ErrConfig (no GPU needed).
func TestFP8GradientsRefused(t *testing.T) {
	if _, err := FP8Gradients(nil, single.New(collective.Device, nil), fp8grad.Config{}); !errors.Is(err, fp8grad.ErrConfig) {
		t.Errorf("no backend: %v, want fp8grad.ErrConfig", err)
	}
}
