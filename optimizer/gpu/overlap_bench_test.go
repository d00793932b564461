package gpu

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// BenchmarkStepAsync measures, on one GPU with a one-rank NCCL
// communicator, the host time of a step of 16 parameters of 2^22 elements
// (67M parameters) and the host's waits for the GPU in it (syncs/op,
// cuda.Device.HostSyncs): "sync" is GradReady then Step (the gathers
// waited for), "async" GradReady then StepAsync then WaitParam of every
// parameter, the pipeline's hot path.
func BenchmarkStepAsync(b *testing.B) {
	r := ncclOne(b)
	params := make([]optimizer.Param, 16)
	for i := range params {
		params[i] = optimizer.Param{Name: fmt.Sprintf("w%d", i), Shape: []int{1 << 11, 1 << 11}}
	}
	for _, mode := range []string{"sync", "async"} {
		b.Run(mode, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cfg := optimizer.Config{}
			o, err := optimizer.New(ctx, r.Comm, r.Backend, params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			for _, p := range params {
				if err := o.SetGrad(p.Name, optimizertest.Grad(p, 1, 0)); err != nil {
					b.Fatal(err)
				}
			}
			dev := r.Backend.Device()
			before := dev.HostSyncs()
			n := 0
			for b.Loop() {
				for i := len(params) - 1; i >= 0; i-- {
					if err := o.GradReady(params[i].Name); err != nil {
						b.Fatal(err)
					}
				}
				step := o.Step
				if mode == "async" {
					step = o.StepAsync
				}
				if _, err := step(ctx); err != nil {
					b.Fatal(err)
				}
				if err := o.WaitGathers(ctx); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(dev.HostSyncs()-before)/float64(n), "syncs/op")
			if err := r.Backend.Sync(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
