package optimizer_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// deviceScaler is the CPU backend that also derives scales itself
// (backend.DeviceScaler), as the GPU backend does on its stream.
type deviceScaler struct {
	*cpu.Backend
	calls int
}

func (d *deviceScaler) ScalesFromAmax(scale, scaleInv, amax, ctl buffer.Buffer, n int, r fp8.Recipe) error {
	d.calls++
	if ctl != nil && binary.LittleEndian.Uint32(ctl.(buffer.HostBuffer)[backend.ControlSkipOff:]) != 0 {
		return nil
	}
	s, inv, a := scale.(buffer.HostBuffer), scaleInv.(buffer.HostBuffer), amax.(buffer.HostBuffer)
	for i := range n {
		sc, si := fp8.ScaleFromAmax(math.Float32frombits(binary.LittleEndian.Uint32(a[4*i:])), r.Format, r.Margin, r.PowerOf2)
		binary.LittleEndian.PutUint32(s[4*i:], math.Float32bits(sc))
		binary.LittleEndian.PutUint32(inv[4*i:], math.Float32bits(si))
	}
	return nil
}

// TestDeviceScales trains 3 ranks whose backend derives the scales itself
// (the path of optimizer/gpu, which never reads the amaxes on the host)
// and 3 ranks of the plain CPU backend, for every recipe and through the
// overlapped pipeline: results, scalar state and state must be
// bit-identical, and the derivation must have run exactly for the recipes
// whose scales come from the reduced amax alone.
func TestDeviceScales(t *testing.T) {
	params := optimizertest.AwkwardParams()
	ov := overlapVariants[1]
	micro := ov.MicroBatches
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			grad := nanGrad(micro)
			want := optimizertest.Run(t, 3, overlapSteps, params, cfg, optimizertest.Accumulated(grad, micro))
			calls := make([]int, 3)
			got := optimizertest.RunRanks(t, 3, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
				be := &deviceScaler{Backend: cpu.New(1)}
				defer func() { calls[comm.Rank()] = be.calls }()
				return optimizertest.TrainOverlapped(ctx, comm, be, params, cfg, overlapSteps, grad, ov)
			})
			for r := range 3 {
				sameRun(t, name, want[r], got[r])
			}
			// New's cast, then each step's but the skipped one.
			wantCalls := 0
			if mode := cfg.Recipe.Scaling; mode == fp8.TensorCurrent || mode == fp8.Block128x128 || mode == 0 {
				wantCalls = 1 + overlapSteps - 1
			}
			if calls[0] != wantCalls {
				t.Errorf("ScalesFromAmax called %d times, want %d", calls[0], wantCalls)
			}
		})
	}
}
