package optimizer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// recorder is a communicator that records the kind and source size of the
// first op of every group started.
type recorder struct {
	collective.Communicator
	mu     sync.Mutex
	starts []collective.Op
}

func (r *recorder) Start(ops ...collective.Op) collective.Work {
	r.mu.Lock()
	r.starts = append(r.starts, ops[0])
	r.mu.Unlock()
	return r.Communicator.Start(ops...)
}

// reduceScatters returns the reduce-scatters started so far.
func (r *recorder) reduceScatters() []collective.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []collective.Op
	for _, op := range r.starts {
		if op.Kind == collective.OpReduceScatter {
			out = append(out, op)
		}
	}
	return out
}

// newOverlapped makes a one-rank optimizer of optimizertest.AwkwardParams
// on a recording in-process communicator with cfg.
func newOverlapped(t *testing.T, cfg optimizer.Config) (*optimizer.Optimizer, *recorder) {
	t.Helper()
	rec := &recorder{Communicator: inproc.Communicators(1)[0]}
	params := optimizertest.AwkwardParams()
	o, err := optimizer.New(context.Background(), rec, cpu.New(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close(); rec.Close() })
	return o, rec
}

// TestBackwardOrder declares the gradients of optimizertest.AwkwardParams
// (several FP8 and high-precision buckets, listed in forward order) ready in
// the backward order and checks after every GradReady that exactly the
// buckets whose parameters are all declared have started their
// reduce-scatter, the last bucket first: with parameters listed in forward
// order, the layout's buckets complete in the order they start, so none
// waits behind another.
func TestBackwardOrder(t *testing.T) {
	o, rec := newOverlapped(t, optimizertest.Configs()["E4M3 TensorCurrent(margin=0, pow2=false)"])
	l := o.Layout()
	if len(l.Buckets) < 4 {
		t.Fatalf("%d buckets: the test wants several", len(l.Buckets))
	}
	declared := map[int]bool{}
	for i := len(l.Params) - 1; i >= 0; i-- {
		if err := o.GradReady(l.Params[i].Name); err != nil {
			t.Fatal(err)
		}
		declared[i] = true
		complete := 0
		for _, b := range l.Buckets {
			all := true
			for _, p := range b.Params {
				all = all && declared[p]
			}
			if all {
				complete++
			}
		}
		rs := rec.reduceScatters()
		if len(rs) != complete {
			t.Fatalf("after GradReady(%q): %d reduce-scatters started, %d buckets complete", l.Params[i].Name, len(rs), complete)
		}
		for k, op := range rs {
			b := len(l.Buckets) - 1 - k
			if want := l.Buckets[b].Size * 2; op.Src.Len() != want { // bfloat16 gradients
				t.Fatalf("reduce-scatter %d has %d bytes, bucket %d %d", k, op.Src.Len(), b, want)
			}
		}
	}
	if _, err := o.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestGradReadyMisuse checks the errors of GradReady and of the gradient
// writes it forbids: an unknown name, a parameter declared more often than
// MicroBatches, SetGrad and ZeroGrad while a reduce-scatter is in flight;
// none of them breaks the optimizer, whose next Step succeeds.
func TestGradReadyMisuse(t *testing.T) {
	cfg := optimizertest.Configs()["sgd"]
	cfg.MicroBatches = 2
	o, _ := newOverlapped(t, cfg)
	if err := o.GradReady("nope"); !errors.Is(err, optimizer.ErrUnknownParam) {
		t.Errorf("GradReady(nope): %v, want ErrUnknownParam", err)
	}
	l := o.Layout()
	last := l.Params[len(l.Params)-1].Name // alone with "scalar" in the last bucket
	for range 2 {
		if err := o.GradReady(last); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.GradReady(last); !errors.Is(err, optimizer.ErrGradReady) {
		t.Errorf("third GradReady(%q) with MicroBatches 2: %v, want ErrGradReady", last, err)
	}
	if err := o.SetGrad("scalar", []float32{1}); err != nil {
		t.Errorf("SetGrad(scalar) before its bucket is complete: %v", err)
	}
	for range 2 {
		if err := o.GradReady("scalar"); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.SetGrad("scalar", []float32{1}); !errors.Is(err, optimizer.ErrGradReady) {
		t.Errorf("SetGrad(scalar) with its reduce-scatter in flight: %v, want ErrGradReady", err)
	}
	if err := o.ZeroGrad(); !errors.Is(err, optimizer.ErrGradReady) {
		t.Errorf("ZeroGrad with a reduce-scatter in flight: %v, want ErrGradReady", err)
	}
	for _, p := range l.Params[:len(l.Params)-2] {
		for range 2 {
			if err := o.GradReady(p.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := o.Step(context.Background()); err != nil {
		t.Fatalf("Step after the refused calls: %v", err)
	}
	if err := o.GradReady(last); err != nil {
		t.Errorf("GradReady after Step (a new step): %v", err)
	}
}

// TestParamBeforeWait checks that after StepAsync every parameter is
// unreadable (Param, Tensor, Weights: ErrNotGathered) until its bucket is
// waited for, that WaitParam frees its bucket only, and that steps taken
// without any wait still give the bits of the synchronous Step.
func TestParamBeforeWait(t *testing.T) {
	cfg := optimizertest.Configs()["E4M3 Block128x128(margin=0, pow2=false)"]
	params := optimizertest.AwkwardParams()
	want := optimizertest.Run(t, 2, 3, params, cfg, optimizertest.RankGrad)
	got := optimizertest.RunRanks(t, 2, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
		o, err := optimizer.New(ctx, comm, cpu.New(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
		if err != nil {
			return optimizertest.Result{}, err
		}
		defer o.Close()
		var res optimizertest.Result
		for s := range 3 {
			for _, p := range params {
				if err := o.SetGrad(p.Name, optimizertest.RankGrad(p, s, comm.Rank())); err != nil {
					return res, err
				}
			}
			sr, err := o.StepAsync(ctx) // no wait before the next step
			if err != nil {
				return res, err
			}
			res.Results = append(res.Results, sr)
		}
		if comm.Rank() == 0 {
			checkNotGathered(t, ctx, o, params)
		} else if err := o.WaitGathers(ctx); err != nil {
			return res, err
		}
		out, err := optimizertest.Collect(o, params)
		out.Results = res.Results
		return out, err
	})
	for r := range 2 {
		sameRun(t, fmt.Sprintf("rank %d", r), want[r], got[r])
	}
}

// checkNotGathered checks the reads refused before WaitParam, then waits
// for every bucket one parameter at a time.
func checkNotGathered(t *testing.T, ctx context.Context, o *optimizer.Optimizer, params []optimizer.Param) {
	waited := map[int]bool{}
	for _, p := range params {
		b := o.Layout().Places[o.Layout().Index(p.Name)].Bucket
		_, err1 := o.Param(p.Name)
		_, err2 := o.Weights(p.Name)
		if waited[b] != (err1 == nil) || waited[b] != (err2 == nil) {
			t.Errorf("%q, bucket waited %t: Param %v, Weights %v", p.Name, waited[b], err1, err2)
		}
		if !waited[b] && (!errors.Is(err1, optimizer.ErrNotGathered) || !errors.Is(err2, optimizer.ErrNotGathered)) {
			t.Errorf("%q before WaitParam: Param %v, Weights %v, want ErrNotGathered", p.Name, err1, err2)
		}
		if err := o.WaitParam(ctx, p.Name); err != nil {
			t.Fatal(err)
		}
		waited[b] = true
		if _, err := o.Param(p.Name); err != nil {
			t.Errorf("Param(%q) after WaitParam: %v", p.Name, err)
		}
	}
	if err := o.WaitParam(ctx, "nope"); !errors.Is(err, optimizer.ErrUnknownParam) {
		t.Errorf("WaitParam(nope): %v, want ErrUnknownParam", err)
	}
}

// TestMissingGradReady has rank 0 of 2 forget one GradReady: its Step
// fails at once with ErrGradReady naming the parameter and breaks the
// optimizer; rank 1, whose reduce-scatters can no longer all meet, fails
// as soon as rank 0 closes its communicator (ErrPeerLost), long before its
// deadline: nobody hangs.
func TestMissingGradReady(t *testing.T) {
	cfg := optimizertest.Configs()["E4M3 TensorCurrent(margin=0, pow2=false)"]
	params := optimizertest.AwkwardParams()
	comms := inproc.Communicators(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o, err := optimizer.New(ctx, comms[r], cpu.New(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
			if err != nil {
				errs[r] = err
				return
			}
			for _, p := range params {
				if r == 0 && p.Name == "one" {
					continue
				}
				if err := o.GradReady(p.Name); err != nil {
					errs[r] = err
					return
				}
			}
			_, errs[r] = o.Step(ctx)
			if r == 0 {
				if _, err := o.Step(ctx); !errors.Is(err, optimizer.ErrBroken) {
					t.Errorf("rank 0: Step after the failed one: %v, want ErrBroken", err)
				}
				o.Close()
				comms[r].Close()
			}
		})
	}
	wg.Wait()
	comms[1].Close()
	if !errors.Is(errs[0], optimizer.ErrGradReady) || (errs[0] == nil || !strings.Contains(errs[0].Error(), `"one"`)) {
		t.Errorf("rank 0: %v, want ErrGradReady naming \"one\"", errs[0])
	}
	if !errors.Is(errs[1], collective.ErrPeerLost) {
		t.Errorf("rank 1: %v, want ErrPeerLost", errs[1])
	}
}

// TestGradReadyConcurrent declares the gradients from one goroutine per
// parameter, as parallel backward hooks would (SetGrad then GradReady, two
// micro-batches), on 3 ranks: the state must equal the synchronous Step's
// on the accumulated gradients (and the race detector stay quiet).
func TestGradReadyConcurrent(t *testing.T) {
	cfg := optimizertest.Configs()["E4M3 TensorDelayed(margin=0, pow2=false, history=4 max)"]
	params := optimizertest.AwkwardParams()
	const steps, micro = 3, 2
	want := optimizertest.Run(t, 3, steps, params, cfg, optimizertest.Accumulated(optimizertest.RankGrad, micro))
	got := optimizertest.RunRanks(t, 3, cfg, func(ctx context.Context, comm collective.Communicator, cfg optimizer.Config) (optimizertest.Result, error) {
		cfg.MicroBatches = micro
		o, err := optimizer.New(ctx, comm, cpu.New(1), params, optimizer.FromMap(optimizertest.InitWeights(params, 1)), cfg)
		if err != nil {
			return optimizertest.Result{}, err
		}
		defer o.Close()
		var res optimizertest.Result
		for s := range steps {
			if err := o.WaitGathers(ctx); err != nil {
				return res, err
			}
			errs := make([]error, len(params))
			var wg sync.WaitGroup
			for i, p := range params {
				wg.Go(func() {
					g := optimizertest.Accumulated(optimizertest.RankGrad, micro)(p, s, comm.Rank())
					for range micro {
						if errs[i] = o.SetGrad(p.Name, g); errs[i] != nil {
							return
						}
						if errs[i] = o.GradReady(p.Name); errs[i] != nil {
							return
						}
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return res, err
			}
			sr, err := o.StepAsync(ctx)
			if err != nil {
				return res, err
			}
			res.Results = append(res.Results, sr)
		}
		if err := o.WaitGathers(ctx); err != nil {
			return res, err
		}
		out, err := optimizertest.Collect(o, params)
		out.Results = res.Results
		return out, err
	})
	for r := range 3 {
		sameRun(t, fmt.Sprintf("rank %d", r), want[r], got[r])
	}
}
