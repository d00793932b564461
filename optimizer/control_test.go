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
	"github.com/distopt/distopt/optimizer/backendtest"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// deferring is the CPU backend that derives scales itself and reads its
// memory back "later" (backend.DeviceScaler and AsyncReader), as the GPU
// backend does: StepAsync then leaves every step's decision in the control
// block and enqueues all phases whatever it is. Every other read reports
// itself not done at first, so that both ways of resolving (landed,
// waited for) run.
type deferring struct {
	deviceScaler
	reads, waits, delayed int
}

func (d *deferring) ReadLater(src buffer.Buffer, n int) (backend.PendingRead, error) {
	d.reads++
	return &hostRead{d: d, b: append([]byte(nil), src.(buffer.HostBuffer)[:n]...), late: d.reads%2 == 0}, nil
}

// DelayedScales is backend.DelayedScaler's contract written out over
// host memory, with fp8's history reduction and scale.
func (d *deferring) DelayedScales(scale, scaleInv, cast, hist, amax, ctl buffer.Buffer, n, l int, r fp8.Recipe) error {
	if binary.LittleEndian.Uint32(ctl.(buffer.HostBuffer)[backend.ControlSkipOff:]) != 0 {
		return nil
	}
	f32 := func(b buffer.Buffer, i int) float32 {
		return math.Float32frombits(binary.LittleEndian.Uint32(b.(buffer.HostBuffer)[4*i:]))
	}
	put := func(b buffer.Buffer, i int, x float32) {
		binary.LittleEndian.PutUint32(b.(buffer.HostBuffer)[4*i:], math.Float32bits(x))
	}
	for i := range n {
		s := f32(scale, i)
		put(cast, i, s)
		put(scaleInv, i, 1/s)
		row := make([]float32, l)
		for j := range l - 1 {
			row[j] = f32(hist, i*l+j+1)
		}
		row[l-1] = f32(amax, i)
		red := row[l-1]
		if r.HistoryReduce == fp8.HistoryMax {
			red = 0
			for _, v := range row {
				red = fp8.MaxAmax(red, v)
			}
		}
		for j, v := range row {
			put(hist, i*l+j, v)
		}
		sc, _ := fp8.ScaleFromAmax(red, r.Format, r.Margin, r.PowerOf2)
		put(scale, i, sc)
	}
	d.delayed++
	return nil
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
// must have stayed on the "device" (one ReadLater a step) for every
// recipe, delayed scaling's histories included (DelayedScales at every
// step but the skipped one).
func TestDeferredStep(t *testing.T) {
	params := optimizertest.AwkwardParams()
	ov := overlapVariants[1]
	micro := ov.MicroBatches
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			grad := nanGrad(micro)
			want := optimizertest.Run(t, 3, overlapSteps, params, cfg, optimizertest.Accumulated(grad, micro))
			reads, delayed := make([]int, 3), make([]int, 3)
			got := optimizertest.RunRanks(t, 3, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
				be := &deferring{deviceScaler: deviceScaler{Backend: cpu.New(1)}}
				defer func() { reads[comm.Rank()], delayed[comm.Rank()] = be.reads, be.delayed }()
				return optimizertest.TrainOverlapped(ctx, comm, be, params, cfg, overlapSteps, grad, ov)
			})
			if !want[0].Results[overlapSkip].Skipped {
				t.Fatalf("step %d was not skipped", overlapSkip)
			}
			for r := range 3 {
				sameRun(t, name, want[r], got[r])
			}
			if reads[0] != overlapSteps {
				t.Errorf("%d steps left their decision on the device, want %d", reads[0], overlapSteps)
			}
			wantDelayed := 0
			if cfg.Recipe.ScaleSource() == fp8.FromHistory {
				wantDelayed = overlapSteps - 1 // the skipped step's kernel returns at once
			}
			if delayed[0] != wantDelayed {
				t.Errorf("the histories advanced on the device %d times, want %d", delayed[0], wantDelayed)
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
		be := &deferring{deviceScaler: deviceScaler{Backend: cpu.New(1)}}
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

// TestDeferringConformance runs the control part of the backend
// conformance suite on the deferring backend: its DelayedScales and
// ScalesFromAmax, the host-memory twins of optimizer/gpu's kernels, must
// meet the suite's references (fp8.AmaxHistory, fp8.ScaleFromAmax) that
// the GPU meets.
func TestDeferringConformance(t *testing.T) {
	backendtest.Controlled(t, &deferring{deviceScaler: deviceScaler{Backend: cpu.New(1)}})
}
