package gpu

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	inccl "github.com/distopt/distopt/internal/nccl"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// ncclOne sets up a one-rank GPU job on GPU 0 with Setup (its store on a
// free loopback port): the CUDA backend and an NCCL communicator of one
// rank ordered after the backend's stream. It skips the test without a GPU
// or NCCL (fails it under DISTOPT_REQUIRE_GPU=1) and closes the job at the
// end.
func ncclOne(tb testing.TB) *Rank {
	tb.Helper()
	// OneRankCopies: NCCL work (events, capture in a graph) even on one rank.
	return ncclOneWith(tb, nccl.Config{OneRankCopies: true})
}

// ncclOneWith is ncclOne with the communicator's configuration cfg.
func ncclOneWith(tb testing.TB, cfg nccl.Config) *Rank {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := rendezvous.Config{Rank: 0, WorldSize: 1, LocalRank: 0, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: port, RunID: "overlap"}
	r, err := Setup(ctx, rc, cfg)
	cudatest.Unavailable(tb, err, ErrUnavailable, inccl.ErrNoLibrary)
	tb.Cleanup(func() {
		if err := r.Close(); err != nil {
			tb.Errorf("closing the job: %v", err)
		}
	})
	return r
}

// skipped returns the number of works After has found already waited for.
func (b *Backend) skipped() int64 {
	b.orderMu.Lock()
	defer b.orderMu.Unlock()
	return b.skippedWaits
}

// TestOverlapStep trains through the overlapped pipeline (GradReady,
// accumulation, StepAsync, WaitParam) on the CUDA backend with a one-rank
// NCCL communicator (the backend orders itself after its groups on the
// device), for every recipe, with a skipped step, and compares it with the
// synchronous Step on the same GPU and communicator (step results, scalar
// state and every byte of state) and with the CPU backend (every byte of
// state): all must be bit-identical.
func TestOverlapStep(t *testing.T) {
	r := ncclOne(t)
	overlapStep(t, r.Comm, r.Backend)
}

// TestOverlapStepSingle is TestOverlapStep with collective/single on
// device memory (copies queued on the backend's stream, work the backend
// does not order after: the optimizer waits on the host, at once).
func TestOverlapStepSingle(t *testing.T) {
	b := open(t)
	copier := func(dst, src buffer.Buffer) error {
		d, s := dst.(buffer.DeviceBuffer), src.(buffer.DeviceBuffer)
		return b.s.CopyDtoD(ptrOf(d), ptrOf(s), min(d.Size, s.Size))
	}
	overlapStep(t, single.New(buffer.Device, copier), b)
}

// overlapStep is the body of TestOverlapStep on comm and be.
func overlapStep(t *testing.T, comm collective.Communicator, be *Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	params := optimizertest.AwkwardParams()
	const steps = 6
	for name, cfg := range stepConfigs() {
		for _, ov := range []optimizertest.Overlap{{MicroBatches: 1}, {MicroBatches: 3, Shuffle: true}, {MicroBatches: 2, Sync: true}} {
			t.Run(fmt.Sprintf("%s/%+v", name, ov), func(t *testing.T) {
				micro := max(1, ov.MicroBatches)
				acc := optimizertest.Accumulated(oneRankGrad, micro)
				got, err := optimizertest.TrainOverlapped(ctx, comm, be, params, cfg, steps, oneRankGrad, ov)
				if err != nil {
					t.Fatal(err)
				}
				want, err := optimizertest.Train(ctx, comm, be, params, cfg, steps, acc)
				if err != nil {
					t.Fatal(err)
				}
				cpu := train(t, single.New(buffer.Host, nil), cpu.New(2), cfg, steps, acc)
				compareOverlap(t, want, got, cpu)
			})
		}
	}
}

// compareOverlap fails t unless got (overlapped) took the same steps as
// want (synchronous, same backend), one of them skipped, with the same
// scalar state, and holds the bits of want and of cpu.
func compareOverlap(t *testing.T, want, got, cpu optimizertest.Result) {
	t.Helper()
	skipped := false
	for i := range got.Results {
		g, w := got.Results[i], want.Results[i]
		g.Timings, w.Timings = optimizer.Timings{}, optimizer.Timings{}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("step %d: %+v, synchronous %+v", i, g, w)
		}
		skipped = skipped || g.Skipped
	}
	if !skipped {
		t.Errorf("no step was skipped")
	}
	if !reflect.DeepEqual(got.Scalars, want.Scalars) {
		t.Errorf("scalar state %+v, synchronous %+v", got.Scalars, want.Scalars)
	}
	for _, d := range optimizertest.Diff(want, got) {
		t.Errorf("overlapped against synchronous: %s", d)
	}
	for _, d := range optimizertest.Diff(cpu, got) {
		t.Errorf("overlapped against the CPU backend: %s", d)
	}
}

// TestOverlapNoHostWait checks that the host never waits for the GPU in
// the pipeline's own calls: GradReady (which starts reduce-scatters) and
// WaitParam (the forward's wait for a gather) leave the device's count of
// host synchronisations unchanged, step after step, and so does StepAsync
// (current and delayed scaling: the scales, the amax histories and the
// step's decision stay on the device); and that StepAsync makes the compute
// stream wait once for all the reduce-scatters.
func TestOverlapNoHostWait(t *testing.T) {
	r := ncclOne(t)
	for _, name := range []string{"E4M3 TensorCurrent(margin=0, pow2=false)", "E4M3 TensorDelayed(margin=0, pow2=false, history=4 max)"} {
		cfg, ok := stepConfigs()[name]
		if !ok {
			t.Fatalf("no configuration %q", name)
		}
		t.Run(name, func(t *testing.T) { noHostWait(t, r, cfg) })
	}
}

// noHostWait is TestOverlapNoHostWait for one configuration.
func noHostWait(t *testing.T, r *Rank, cfg optimizer.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	params := optimizertest.AwkwardParams()
	o, err := optimizer.New(ctx, r.Comm, r.Backend, params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	dev := r.Backend.dev
	for s := range 4 {
		for _, p := range params {
			if err := o.SetGrad(p.Name, optimizertest.Grad(p, uint64(s), s)); err != nil {
				t.Fatal(err)
			}
		}
		before := dev.HostSyncs()
		for i := len(params) - 1; i >= 0; i-- {
			if err := o.GradReady(params[i].Name); err != nil {
				t.Fatal(err)
			}
		}
		if n := dev.HostSyncs() - before; n != 0 {
			t.Errorf("step %d: GradReady of every parameter waited for the GPU %d times", s, n)
		}
		inStep, skips := dev.HostSyncs(), r.Backend.skipped()
		if _, err := o.StepAsync(ctx); err != nil {
			t.Fatal(err)
		}
		// One device wait for all the reduce-scatters: the newest (After
		// skips the works that precede the one the stream waited for).
		if n, nb := r.Backend.skipped()-skips, len(o.Layout().Buckets); n != int64(nb-1) {
			t.Errorf("step %d: After skipped %d waits for the %d reduce-scatters, want %d", s, n, nb, nb-1)
		}
		// Never: the decision and the scales are made on the device, the
		// previous step's decision and the segment tables' staging memory
		// were released by the uploads of SetGrad, which waited.
		if n := dev.HostSyncs() - inStep; n != 0 {
			t.Errorf("step %d: StepAsync waited for the GPU %d times, want 0", s, n)
		}
		before = dev.HostSyncs()
		for _, p := range params {
			if err := o.WaitParam(ctx, p.Name); err != nil {
				t.Fatal(err)
			}
		}
		if n := dev.HostSyncs() - before; n != 0 {
			t.Errorf("step %d: WaitParam of every parameter waited for the GPU %d times", s, n)
		}
	}
}
