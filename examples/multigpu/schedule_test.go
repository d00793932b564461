package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// callLog is the order of one rank's calls: the optimizer's (wait, ready,
// step), the model's (fwd, bwd, grad) and the communicator's (rs, ag, ar).
type callLog struct {
	mu sync.Mutex
	ev []string
}

func (l *callLog) add(format string, a ...any) {
	l.mu.Lock()
	l.ev = append(l.ev, fmt.Sprintf(format, a...))
	l.mu.Unlock()
}

// loggedOpt logs the optimizer calls the iteration makes.
type loggedOpt struct {
	*optimizer.Optimizer
	log *callLog
}

func (o loggedOpt) WaitParam(ctx context.Context, name string) error {
	o.log.add("wait %s", name)
	return o.Optimizer.WaitParam(ctx, name)
}

func (o loggedOpt) GradReady(name string) error {
	o.log.add("ready %s", name)
	return o.Optimizer.GradReady(name)
}

func (o loggedOpt) StepAsync(ctx context.Context) (optimizer.StepResult, error) {
	o.log.add("step")
	return o.Optimizer.StepAsync(ctx)
}

// logComm logs each group started: rs BUCKET (from the gradient tag), ag
// BYTES (of the gathered buffer), ar.
type logComm struct {
	collective.Communicator
	log *callLog
}

func (c logComm) Start(ops ...collective.Op) collective.Work {
	switch op := ops[0]; op.Kind {
	case collective.OpReduceScatter:
		c.log.add("rs %d", op.Tag-1)
	case collective.OpAllGather:
		c.log.add("ag %d", op.Dst.Len())
	default:
		c.log.add("ar")
	}
	return c.Communicator.Start(ops...)
}

// fakeCompute is the computer of the tests: it logs its calls and writes
// each gradient in full on the host, a deterministic function of the
// parameter, the rank and the call count (so that two runs agree).
type fakeCompute struct {
	log    *callLog
	be     backend.Backend
	params []optimizer.Param
	rank   int
	calls  int
}

func (f *fakeCompute) Forward(i int, w optimizer.ParamView) error {
	if w.Name != f.params[i].Name {
		return fmt.Errorf("forward of %d got the weight of %s", i, w.Name)
	}
	f.log.add("fwd %s", w.Name)
	return nil
}

func (f *fakeCompute) Backward(i int, w optimizer.ParamView, g optimizer.GradView, accumulate bool) error {
	f.log.add("bwd %s", g.Name)
	return f.write(i, g)
}

func (f *fakeCompute) WriteGrad(i int, g optimizer.GradView, accumulate bool) error {
	f.log.add("grad %s", g.Name)
	return f.write(i, g)
}

func (f *fakeCompute) write(i int, g optimizer.GradView) error {
	f.calls++
	b := make([]byte, g.Data.Len())
	for k := 0; k+1 < len(b); k += 2 {
		v := float32(int((k/2+7*i+13*f.rank+f.calls)%17)-8) / 1024
		binary.LittleEndian.PutUint16(b[k:], fp8.BF16FromFloat32(v))
	}
	return f.be.Write(g.Data, 0, b)
}

// scheduleRank is one in-process rank of the schedule tests.
type scheduleRank struct {
	log  *callLog
	opt  *optimizer.Optimizer
	rec  *recorder
	tr   *trainer
	comp *fakeCompute
}

// scheduleConfig has small buckets, so that the model spans several.
func scheduleConfig(micro int) optimizer.Config {
	return optimizer.Config{LR: optimizer.Constant(1e-3), WeightDecay: 0.1, MicroBatches: micro,
		Layout: shard.Options{BucketElements: 40000}}
}

// withRanks runs f on d in-process ranks of the small model.
func withRanks(t *testing.T, d, micro int, f func(r *scheduleRank) error) []*scheduleRank {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	params := smallGPT.Params()
	comms := inproc.New(d)
	ranks := make([]*scheduleRank, d)
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r := range d {
		wg.Go(func() {
			defer comms[r].Close()
			log := &callLog{}
			be := cpu.New(1)
			rec := &recorder{Communicator: logComm{comms[r], log}}
			opt, err := optimizer.New(ctx, rec, be, params, initValues(smallGPT.Layers), scheduleConfig(micro))
			if err != nil {
				errs[r] = err
				return
			}
			defer opt.Close()
			log.ev = nil // New's own collectives (the agreement, the first gather)
			comp := &fakeCompute{log: log, be: be, params: params, rank: r}
			sr := &scheduleRank{log: log, opt: opt, rec: rec, comp: comp,
				tr: &trainer{opt: loggedOpt{opt, log}, params: params, comp: comp, micro: micro}}
			ranks[r] = sr
			errs[r] = f(sr)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return ranks
}

// TestIterationSchedule checks the calls of one overlapped iteration
// against the optimizer's layout, on two in-process ranks, with one and
// with two micro-batches: every GEMM's weight read after a wait for it
// since the last step; every GradReady after its gradient's write in the
// same micro-batch; each bucket's reduce-scatter started once, after the
// last GradReady of every parameter in it, the buckets in reverse order;
// then the gathers in bucket order after the step.
func TestIterationSchedule(t *testing.T) {
	for _, micro := range []int{1, 2} {
		t.Run(fmt.Sprintf("micro%d", micro), func(t *testing.T) {
			ranks := withRanks(t, 2, micro, func(r *scheduleRank) error {
				for range 2 { // the second reads the first one's gathers
					r.log.mu.Lock()
					r.log.ev = nil
					r.log.mu.Unlock()
					if err := r.tr.iteration(t.Context(), iterOverlap); err != nil {
						return err
					}
				}
				return r.opt.WaitGathers(t.Context())
			})
			for rank, r := range ranks {
				checkSchedule(t, rank, r.opt.Layout(), r.opt.Config(), r.log.ev, micro)
			}
		})
	}
}

// checkSchedule checks one rank's log of one overlapped iteration.
func checkSchedule(t *testing.T, rank int, l *shard.Layout, cfg optimizer.Config, ev []string, micro int) {
	t.Helper()
	bucketOf := map[string]int{}
	for i, p := range l.Params {
		bucketOf[p.Name] = l.Places[i].Bucket
	}
	waited := map[string]bool{}
	written := map[string]bool{}
	ready := map[string]int{}
	var rs []int
	var ag []int
	stepped := false
	for k, e := range ev {
		verb, arg, _ := strings.Cut(e, " ")
		switch verb {
		case "wait":
			waited[arg] = true
		case "fwd":
			if !waited[arg] {
				t.Errorf("rank %d, call %d: forward of %s without a wait for its gather", rank, k, arg)
			}
		case "bwd", "grad":
			written[arg] = true
			if verb == "bwd" && !waited[arg] {
				t.Errorf("rank %d, call %d: backward of %s reads a weight not waited for", rank, k, arg)
			}
		case "ready":
			if !written[arg] {
				t.Errorf("rank %d, call %d: GradReady(%s) before its gradient was written in this micro-batch", rank, k, arg)
			}
			written[arg] = false
			ready[arg]++
		case "rs":
			var b int
			fmt.Sscan(arg, &b)
			rs = append(rs, b)
			for _, i := range l.Buckets[b].Params {
				if n := ready[l.Params[i].Name]; n != micro {
					t.Errorf("rank %d, call %d: reduce-scatter of bucket %d with %s declared ready %d of %d times", rank, k, b, l.Params[i].Name, n, micro)
				}
			}
		case "step":
			stepped = true
		case "ag":
			if !stepped {
				t.Errorf("rank %d, call %d: all-gather before the step", rank, k)
			}
			var n int
			fmt.Sscan(arg, &n)
			ag = append(ag, n)
		}
	}
	var wantRS, wantAG []int
	for b := len(l.Buckets) - 1; b >= 0; b-- {
		wantRS = append(wantRS, b)
	}
	for _, bk := range l.Buckets {
		size := 1
		if bk.HighPrecision {
			size = cfg.HighPrecisionType.Size()
		}
		wantAG = append(wantAG, bk.Size*size)
	}
	if len(l.Buckets) < 4 {
		t.Fatalf("the test layout has %d buckets; it needs several", len(l.Buckets))
	}
	if !slices.Equal(rs, wantRS) {
		t.Errorf("rank %d: reduce-scatters of buckets %v, want %v (reverse bucket order, once each)", rank, rs, wantRS)
	}
	if !slices.Equal(ag, wantAG) {
		t.Errorf("rank %d: all-gathers of %v bytes, want %v (bucket order)", rank, ag, wantAG)
	}
	for _, p := range l.Params {
		if !waited[p.Name] {
			t.Errorf("rank %d: the forward never waited for %s", rank, p.Name)
		}
	}
}

// TestComputeAndStepIterations checks the other two kinds: a compute
// iteration declares nothing ready and starts no collective; a step
// iteration declares every gradient ready and steps, without the model.
func TestComputeAndStepIterations(t *testing.T) {
	withRanks(t, 2, 1, func(r *scheduleRank) error {
		if err := r.tr.iteration(t.Context(), iterCompute); err != nil {
			return err
		}
		for _, e := range r.log.ev {
			if v, _, _ := strings.Cut(e, " "); v == "ready" || v == "step" || v == "rs" || v == "ag" || v == "ar" {
				return fmt.Errorf("compute iteration made %q", e)
			}
		}
		r.log.ev = nil
		if err := r.tr.iteration(t.Context(), iterStep); err != nil {
			return err
		}
		counts := map[string]int{}
		for _, e := range r.log.ev {
			v, _, _ := strings.Cut(e, " ")
			counts[v]++
		}
		if counts["fwd"]+counts["bwd"]+counts["grad"] != 0 || counts["ready"] != len(r.tr.params) || counts["step"] != 1 ||
			counts["rs"] != len(r.opt.Layout().Buckets) || counts["ag"] != len(r.opt.Layout().Buckets) {
			return fmt.Errorf("step iteration made %v", counts)
		}
		return r.opt.WaitGathers(t.Context())
	})
}

// snapshot is a rank's parameters as the model reads them (FP8 bytes and
// scale_inv, high-precision copies) and the last step's gradient norm.
func snapshot(o *optimizer.Optimizer) (string, error) {
	var buf bytes.Buffer
	for _, p := range o.Layout().Params {
		v, err := o.Param(p.Name)
		if err != nil {
			return "", err
		}
		for _, b := range []buffer.Buffer{v.Data, v.ScaleInv} {
			if b == nil {
				continue
			}
			raw := make([]byte, b.Len())
			if err := o.Backend().Read(raw, b, 0); err != nil {
				return "", err
			}
			buf.Write(raw)
		}
	}
	res, err := o.LastResult()
	fmt.Fprintf(&buf, "norm %v step %d", res.GradNorm, res.Step)
	return buf.String(), err
}

// TestReplayKeepsState checks the claim of recorder.replay: replaying a
// step's collectives between two steps changes nothing the next step
// computes. Two runs on two ranks, with and without a replay between two
// overlapped iterations, must end with the same parameters and norm.
func TestReplayKeepsState(t *testing.T) {
	run := func(replay bool) []string {
		out := make([]string, 2)
		withRanks(t, 2, 1, func(r *scheduleRank) error {
			r.rec.record(true)
			err := r.tr.iteration(t.Context(), iterOverlap)
			r.rec.record(false)
			if err != nil {
				return err
			}
			if err := r.opt.WaitGathers(t.Context()); err != nil {
				return err
			}
			if replay {
				for range 2 {
					if _, err := r.rec.replay(t.Context(), r.opt.Backend()); err != nil {
						return err
					}
				}
			}
			if err := r.tr.iteration(t.Context(), iterOverlap); err != nil {
				return err
			}
			if err := r.opt.WaitGathers(t.Context()); err != nil {
				return err
			}
			rank := r.comp.rank
			out[rank], err = snapshot(r.opt)
			return err
		})
		return out
	}
	plain, replayed := run(false), run(true)
	for r := range plain {
		if plain[r] != replayed[r] {
			t.Errorf("rank %d: parameters or norm differ after a replay of the step's collectives", r)
		}
	}
	if plain[0] != plain[1] {
		t.Errorf("the ranks disagree on the parameters")
	}
}

// TestMeasureCPU runs the four passes on two in-process ranks with the
// host clock and checks their shape and accounting.
func TestMeasureCPU(t *testing.T) {
	const n = 3
	res := make([]*overlapRank, 2)
	withRanks(t, 2, 1, func(r *scheduleRank) error {
		m := &measurer{t: r.tr, rec: r.rec, clk: &hostClock{}, n: n}
		if _, err := m.run(t.Context(), 0); err == nil {
			return fmt.Errorf("no warm-up accepted")
		}
		ov, err := m.run(t.Context(), 2)
		res[r.comp.rank] = ov
		return err
	})
	for rank, ov := range res {
		for name, xs := range map[string][]float64{"compute": ov.ComputeMs, "comm": ov.CommMs, "step": ov.StepMs, "iteration": ov.IterMs, "exposed": ov.Iteration} {
			if len(xs) != n {
				t.Errorf("rank %d: %d %s times, want %d", rank, len(xs), name, n)
			}
			for _, x := range xs {
				if x < 0 && name != "exposed" {
					t.Errorf("rank %d: negative %s time %g", rank, name, x)
				}
			}
		}
		want := account(median(ov.ComputeMs), median(ov.CommMs), median(ov.StepMs), median(ov.IterMs))
		if ov.Medians != want {
			t.Errorf("rank %d: medians %+v, want %+v", rank, ov.Medians, want)
		}
	}
}
