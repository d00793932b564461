package gpu

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// TestStepGraph captures one whole step in a CUDA graph on a one-rank NCCL
// job, for every recipe (delayed scaling's histories on the device): the
// backward's GradReady of every parameter (which starts the
// reduce-scatters), StepAsync, and WaitGathers, on the backend's stream in
// thread-local capture mode, where any host wait for the GPU would break
// the capture. The graph is launched once; masters, moments, FP8 bytes and
// scales must then equal, byte for byte, those of a twin optimizer that
// took the same two steps uncaptured, and LastResult must report the same
// decision: for a taken step and for a skipped one (a NaN gradient).
func TestStepGraph(t *testing.T) {
	r := ncclOne(t)
	params := optimizertest.AwkwardParams()
	for name, cfg := range stepConfigs() {
		for _, skip := range []bool{false, true} {
			grad := func(p optimizer.Param, s int) []float32 {
				g := optimizertest.Grad(p, uint64(s), s)
				if skip && s == 1 && p.Name == "prime" {
					g[3] = float32(math.NaN())
				}
				return g
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			want, wantRes := graphTwin(t, ctx, r, params, cfg, grad, false)
			got, gotRes := graphTwin(t, ctx, r, params, cfg, grad, true)
			cancel()
			if t.Failed() {
				return
			}
			wantRes.Timings, gotRes.Timings = optimizer.Timings{}, optimizer.Timings{}
			if wantRes != gotRes {
				t.Errorf("%s skip=%v: captured step's result %+v, uncaptured %+v", name, skip, gotRes, wantRes)
			}
			if gotRes.Skipped != skip {
				t.Errorf("%s skip=%v: the captured step's Skipped is %v", name, skip, gotRes.Skipped)
			}
			for _, d := range optimizertest.Diff(want, got) {
				t.Errorf("%s skip=%v: captured against uncaptured: %s", name, skip, d)
			}
		}
	}
}

// graphTwin takes two steps with gradients grad(p, 0) and grad(p, 1): the
// second inside a CUDA graph, captured then launched, when captured. It
// returns the state and the second step's result.
func graphTwin(t *testing.T, ctx context.Context, r *Rank, params []optimizer.Param, cfg optimizer.Config, grad func(optimizer.Param, int) []float32, captured bool) (optimizertest.Result, optimizer.StepResult) {
	t.Helper()
	o, err := optimizer.New(ctx, r.Comm, r.Backend, params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	step := func() {
		for i := len(params) - 1; i >= 0; i-- {
			if err := o.GradReady(params[i].Name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := o.StepAsync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := o.WaitGathers(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for s := range 2 {
		for _, p := range params {
			if err := o.SetGrad(p.Name, grad(p, s)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := o.LastResult(); err != nil { // the first step's, before the capture
			t.Fatal(err)
		}
		if s == 0 || !captured {
			step()
			continue
		}
		g := captureStep(t, r.Backend.s, step)
		defer g.Destroy()
		if err := g.Launch(r.Backend.s); err != nil {
			t.Fatal(err)
		}
		// The events the capture recorded are graph-internal: the host
		// learns that the launch has run from the stream.
		if err := r.Backend.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := o.LastResult()
	if err != nil {
		t.Fatal(err)
	}
	got, err := optimizertest.Collect(o, params)
	if err != nil {
		t.Fatal(err)
	}
	return got, res
}

// captureStep captures what step queues on s into a graph.
func captureStep(t testing.TB, s *cuda.Stream, step func()) *cuda.Graph {
	t.Helper()
	if err := s.BeginCapture(cuda.CaptureThreadLocal); err != nil {
		t.Fatal(err)
	}
	ended := false
	defer func() {
		if !ended { // a failed step: end the capture, keep the stream usable
			if g, err := s.EndCapture(); err == nil {
				g.Destroy()
			}
		}
	}()
	step()
	ended = true
	g, err := s.EndCapture()
	if err != nil {
		t.Fatalf("capturing a step: %v", err)
	}
	return g
}
