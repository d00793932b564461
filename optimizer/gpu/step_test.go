package gpu

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// stepConfigs is optimizertest.Configs without its loss scaler.
func stepConfigs() map[string]optimizer.Config {
	cfgs := optimizertest.Configs()
	delete(cfgs, "loss scaler")
	return cfgs
}

// stepGrad is the gradient of a parameter at a step, with an outlier
// every third step (clipping) and a NaN at step 4 (a skipped step).
func stepGrad(p optimizer.Param, step int) []float32 {
	g := optimizertest.Grad(p, uint64(step), step)
	if step == 4 && p.Name == "prime" {
		g[7] = float32(math.NaN())
	}
	return g
}

// train takes steps steps on one rank of comm with the backend be, setting
// the gradients grad(p, s, 0) of optimizertest.AwkwardParams.
func train(t *testing.T, comm collective.Communicator, be backend.Backend, cfg optimizer.Config, steps int, grad optimizertest.GradFunc) optimizertest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := optimizertest.Train(ctx, comm, be, optimizertest.AwkwardParams(), cfg, steps, grad)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// oneRankGrad is stepGrad as a GradFunc.
func oneRankGrad(p optimizer.Param, step, _ int) []float32 { return stepGrad(p, step) }

// TestStep trains on the GPU backend (one rank, collective/single on device
// memory) and on the CPU backend with the same inputs, for every recipe:
// masters, moments, FP8 bytes, scales and high-precision weights must be
// bit-identical.
func TestStep(t *testing.T) {
	b := open(t)
	copier := func(dst, src buffer.Buffer) error {
		d, s := dst.(buffer.DeviceBuffer), src.(buffer.DeviceBuffer)
		return b.s.CopyDtoD(ptrOf(d), ptrOf(s), min(d.Size, s.Size))
	}
	for name, cfg := range stepConfigs() {
		t.Run(name, func(t *testing.T) {
			const steps = 6
			got := train(t, single.New(buffer.Device, copier), b, cfg, steps, oneRankGrad)
			want := train(t, single.New(buffer.Host, nil), cpu.New(2), cfg, steps, oneRankGrad)
			if !reflect.DeepEqual(got.Skipped(), want.Skipped()) {
				t.Errorf("skipped steps: gpu %v, cpu %v", got.Skipped(), want.Skipped())
			}
			if len(got.Pieces) != len(want.Pieces) {
				t.Fatalf("%d pieces, want %d", len(got.Pieces), len(want.Pieces))
			}
			for _, d := range optimizertest.Diff(want, got) {
				t.Errorf("gpu against cpu: %s", d)
			}
		})
	}
}

func ExampleChoose() {
	be, err := Choose("auto")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer be.Close()
	fmt.Println(be.Memory() == buffer.Host || be.Memory() == buffer.Device)
	// Output: true
}
