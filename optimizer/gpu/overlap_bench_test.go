package gpu

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// BenchmarkStepAsync measures, on one GPU with a one-rank NCCL
// communicator, a step of 16 parameters of 2^22 elements (67M parameters,
// current scaling): ns/op is one iteration (GradReady of every parameter,
// the step, WaitGathers), syncs/op the host's waits for the GPU in it
// (cuda.Device.HostSyncs), step-us and step-syncs the host time and the
// waits of the Step or StepAsync call alone. Modes:
//
//   - sync: Step (the decision read on the host, the gathers waited for);
//   - async: StepAsync back to back, the GPU free to fall behind (each step
//     reads the previous step's decision, waiting when the GPU has not
//     made it yet);
//   - async-idle: StepAsync with the GPU idle when it starts, as after a
//     training loop's forward and backward (the wait for it outside the
//     timer): the enqueue-only host time of the step;
//   - graph: the iteration captured once in a CUDA graph, then launched
//     (host time of a launch; the replays repeat the captured step).
func BenchmarkStepAsync(b *testing.B) {
	r := ncclOne(b)
	params := make([]optimizer.Param, 16)
	for i := range params {
		params[i] = optimizer.Param{Name: fmt.Sprintf("w%d", i), Shape: []int{1 << 11, 1 << 11}}
	}
	for _, mode := range []string{"sync", "async", "async-idle", "graph"} {
		b.Run(mode, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			o, err := optimizer.New(ctx, r.Comm, r.Backend, params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), optimizer.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			for _, p := range params {
				if err := o.SetGrad(p.Name, optimizertest.Grad(p, 1, 0)); err != nil {
					b.Fatal(err)
				}
			}
			benchSteps(b, ctx, r, o, params, mode)
		})
	}
}

// benchSteps is BenchmarkStepAsync's loop for one mode.
func benchSteps(b *testing.B, ctx context.Context, r *Rank, o *optimizer.Optimizer, params []optimizer.Param, mode string) {
	dev, s := r.Backend.dev, r.Backend.s
	var stepTime time.Duration
	var stepSyncs, stepHops int64
	iteration := func() {
		for i := len(params) - 1; i >= 0; i-- {
			if err := o.GradReady(params[i].Name); err != nil {
				b.Fatal(err)
			}
		}
		step := o.StepAsync
		if mode == "sync" {
			step = o.Step
		}
		if mode == "async-ready" {
			b.StopTimer()
			drainComm(b, ctx, r)
			b.StartTimer()
		}
		t0, s0, h0 := time.Now(), dev.HostSyncs(), dev.Hops()
		if _, err := step(ctx); err != nil {
			b.Fatal(err)
		}
		stepTime += time.Since(t0)
		stepSyncs += dev.HostSyncs() - s0
		stepHops += dev.Hops() - h0
		if err := o.WaitGathers(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var g *cuda.Graph
	if mode == "graph" {
		iteration() // warm: tables allocated, decision pending
		if _, err := o.LastResult(); err != nil {
			b.Fatal(err)
		}
		g = captureStep(b, s, iteration)
		defer g.Destroy()
		stepTime, stepSyncs, stepHops = 0, 0, 0
	}
	before, hops0, n := dev.HostSyncs(), dev.Hops(), 0
	idleSyncs := int64(0)
	for b.Loop() {
		switch mode {
		case "graph":
			t0 := time.Now()
			if err := g.Launch(s); err != nil {
				b.Fatal(err)
			}
			stepTime += time.Since(t0)
		case "async-idle", "async-ready":
			b.StopTimer()
			s0 := dev.HostSyncs()
			if err := r.Backend.Sync(); err != nil {
				b.Fatal(err)
			}
			idleSyncs += dev.HostSyncs() - s0
			b.StartTimer()
			iteration()
		default:
			iteration()
		}
		n++
	}
	b.ReportMetric(float64(dev.HostSyncs()-before-idleSyncs)/float64(n), "syncs/op")
	b.ReportMetric(float64(stepTime.Nanoseconds())/1e3/float64(n), "step-us")
	b.ReportMetric(float64(stepSyncs)/float64(n), "step-syncs")
	b.ReportMetric(float64(dev.Hops()-hops0)/float64(n), "hops/op")
	b.ReportMetric(float64(stepHops)/float64(n), "step-hops")
	if err := r.Backend.Sync(); err != nil {
		b.Fatal(err)
	}
}

// drainComm waits until every group started on r's communicator so far
// has been issued and has completed: the issuer hands groups to NCCL in
// the order of Start, so a small all-reduce started now completes after
// them. (async-ready: the step as after a backward pass long enough for
// its reduce-scatters to finish.)
func drainComm(b *testing.B, ctx context.Context, r *Rank) {
	buf, err := r.Backend.Alloc(8)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Backend.Free(buf)
	op := collective.Op{Kind: collective.OpAllReduce, Dst: buf, Src: buf, DType: buffer.Float32, Reduce: collective.Sum}
	if err := r.Comm.Start(op).Wait(ctx); err != nil {
		b.Fatal(err)
	}
}
