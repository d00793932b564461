package optimizer_test

import (
	"context"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// deferring is the CPU backend that derives scales itself and reads its
// memory back "later" (optimizer.DeviceScaler and AsyncReader), as the GPU
// backend does: StepAsync then leaves every step's decision in the control
// block and enqueues all phases whatever it is. Every other read reports
// itself not done at first, so that both ways of resolving (landed,
// waited for) run.
type deferring struct {
	deviceScaler
	reads, waits int
}

func (d *deferring) ReadLater(src collective.Buffer, n int) (optimizer.PendingRead, error) {
	d.reads++
	return &hostRead{d: d, b: append([]byte(nil), src.(collective.HostBuffer)[:n]...), late: d.reads%2 == 0}, nil
}

// hostRead is a copy already made, reported late or not.
type hostRead struct {
	d    *deferring
	b    []byte
	late bool
}

func (h *hostRead) Done() (bool, error) { return !h.late, nil }

func (h *hostRead) Bytes() ([]byte, error) {
	if h.late {
		h.d.waits++
	}
	return h.b, nil
}

// TestDeferredStep trains 3 ranks through the overlapped pipeline on the
// deferring backend, for every configuration with a skipped step, and
// compares them with ranks trained by the synchronous Step on the CPU
// backend: results (completed by LastResult), scalar state (loss scaler,
// histories) and every byte of state must be equal. The step's decision
// must have stayed on the "device" (one ReadLater a step) exactly for the
// recipes whose scales the backend derives itself, delayed scaling keeping
// the synchronous path.
func TestDeferredStep(t *testing.T) {
	params := optimizertest.AwkwardParams()
	ov := overlapVariants[1]
	micro := ov.MicroBatches
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			grad := nanGrad(micro)
			want := optimizertest.Run(t, 3, overlapSteps, params, cfg, optimizertest.Accumulated(grad, micro))
			reads := make([]int, 3)
			got := optimizertest.RunRanks(t, 3, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
				be := &deferring{deviceScaler: deviceScaler{CPU: optimizer.NewCPU(1)}}
				defer func() { reads[comm.Rank()] = be.reads }()
				return optimizertest.TrainOverlapped(ctx, comm, be, params, cfg, overlapSteps, grad, ov)
			})
			if !want[0].Results[overlapSkip].Skipped {
				t.Fatalf("step %d was not skipped", overlapSkip)
			}
			for r := range 3 {
				sameRun(t, name, want[r], got[r])
			}
			wantReads := overlapSteps
			if cfg.Recipe.ScaleSource() == fp8.FromHistory {
				wantReads = 0
			}
			if reads[0] != wantReads {
				t.Errorf("%d steps left their decision on the device, want %d", reads[0], wantReads)
			}
		})
	}
}

// TestDeferredResult checks what StepAsync returns on the deferring
// backend: a Pending result counting the step as taken, completed by
// LastResult (a skipped step included), and the accessors of host state
// (StepCount, LossScale) reading the decision themselves.
func TestDeferredResult(t *testing.T) {
	params := optimizertest.AwkwardParams()
	cfg := optimizertest.Configs()["E4M3 TensorCurrent(margin=0, pow2=false)"]
	cfg.LossScaler = &optimizer.LossScaler{InitScale: 1 << 10, GrowthInterval: 2}
	grad := nanGrad(1)
	optimizertest.RunRanks(t, 1, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
		be := &deferring{deviceScaler: deviceScaler{CPU: optimizer.NewCPU(1)}}
		o, err := optimizer.New(ctx, comm, be, params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
		if err != nil {
			return optimizertest.Result{}, err
		}
		defer o.Close()
		taken := 0
		for s := range overlapSteps {
			for _, p := range params {
				if err := o.SetGrad(p.Name, grad(p, s, 0)); err != nil {
					return optimizertest.Result{}, err
				}
			}
			scale := o.LossScale()
			sr, err := o.StepAsync(ctx)
			if err != nil {
				return optimizertest.Result{}, err
			}
			if !sr.Pending || sr.Step != taken+1 {
				t.Errorf("step %d: StepAsync returned %+v, want Pending and Step %d", s, sr, taken+1)
			}
			full, err := o.LastResult()
			if err != nil {
				return optimizertest.Result{}, err
			}
			if full.Pending || full.LossScale != scale || full.Skipped != (s == overlapSkip) {
				t.Errorf("step %d: LastResult %+v (loss scale before the step %g)", s, full, scale)
			}
			if !full.Skipped {
				taken++
			}
			if o.StepCount() != taken || full.Step != taken {
				t.Errorf("step %d: StepCount %d, result's Step %d, want %d", s, o.StepCount(), full.Step, taken)
			}
			if err := o.WaitGathers(ctx); err != nil {
				return optimizertest.Result{}, err
			}
		}
		return optimizertest.Result{}, nil
	})
}
