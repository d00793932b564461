package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
	"github.com/distopt/distopt/plan"
	"github.com/distopt/distopt/shard"
)

// liveFP8 is what an in-process run reports on rank 0: the residual bytes
// the fp8grad Comm holds after three steps, and the buckets and gradient
// buffers of the optimizer.
type liveFP8 struct {
	residual   int
	buckets    []int // elements, in the optimizer's bucket order
	gradBufs   int
	ranks      int
	reportSize int64 // the optimizer's Report().Total()
}

// runFP8 trains params on d in-process ranks, whose communicators fp8grad
// wraps with fc, for three steps (gradients declared ready in the backward
// order) and returns what rank 0 holds.
func runFP8(t *testing.T, params []optimizer.Param, d int, cfg optimizer.Config, fc fp8grad.Config) liveFP8 {
	t.Helper()
	inner := inproc.Communicators(d)
	var live liveFP8
	var wg sync.WaitGroup
	errs := make([]error, d)
	for r := range d {
		wg.Go(func() { errs[r] = runFP8Rank(r, inner[r], params, cfg, fc, &live) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return live
}

// runFP8Rank is rank r of runFP8; rank 0 fills live.
func runFP8Rank(r int, inner collective.Communicator, params []optimizer.Param, cfg optimizer.Config, fc fp8grad.Config, live *liveFP8) error {
	c, err := fp8grad.New(inner, fc)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	init := map[string][]float32{}
	for _, p := range params {
		init[p.Name] = make([]float32, optimizertest.Numel(p.Shape))
	}
	o, err := optimizer.New(ctx, c, cpu.New(1), params, optimizer.FromMap(init), cfg)
	if err != nil {
		return err
	}
	defer o.Close()
	for step := range 3 {
		for i := len(params) - 1; i >= 0; i-- {
			if err := o.SetGrad(params[i].Name, optimizertest.RankGrad(params[i], step, r)); err != nil {
				return err
			}
			if err := o.GradReady(params[i].Name); err != nil {
				return err
			}
		}
		if _, err := o.Step(ctx); err != nil {
			return err
		}
	}
	if r == 0 {
		live.residual = c.ResidualBytes()
		for _, b := range o.Layout().Buckets {
			live.buckets = append(live.buckets, b.Size)
		}
		live.gradBufs, live.ranks, live.reportSize = o.Config().GradBuffers, c.Size(), o.Report().Total()
	}
	return nil
}

// TestPlanGradFP8 runs `distopt plan -grad-fp8` for small models at d =
// 1, 2, 4, with and without error feedback and sharded gradients, and
// checks its rows against a live in-process run of the same optimizer
// through an fp8grad Comm: the residual row is the bytes of the residuals
// the Comm holds after three steps (ResidualBytes: 4 bytes per element of
// every bucket, not the shard); the staging row is fp8grad.PredictSteps
// over the live optimizer's buckets, started last first, all at once with
// full gradient buffers and at most Config.GradBuffers with sharded ones
// (PredictSteps itself is checked against a model of the device pool in
// collective/fp8grad); the total adds both to the optimizer's own report,
// with no NCCL scratch even with -exact-avg (the reduce-scatter is an
// all-to-all of bytes).
func TestPlanGradFP8(t *testing.T) {
	small := plan.GPTConfig{Layers: 4, Hidden: 32, FFN: 64, Vocab: 100, Positions: 16}
	tied := plan.GPTConfig{Layers: 2, Hidden: 48, FFN: 96, Vocab: 50, Positions: 8, Tied: true}
	shapes := []struct {
		name   string
		args   []string
		params []optimizer.Param
		cfg    optimizer.Config
		fc     fp8grad.Config
	}{
		{"GPT, E4M3, blocks of 32", []string{"-layers", "4", "-hidden", "32", "-ffn", "64", "-vocab", "100", "-positions", "16", "-bucket", "2048", "-grad-fp8", "e4m3", "-grad-block", "32"},
			small.Params(), optimizer.Config{}, fp8grad.Config{Format: fp8.E4M3, Block: 32}},
		{"tied GPT, E5M2, 3 buffers", []string{"-layers", "2", "-hidden", "48", "-ffn", "96", "-vocab", "50", "-positions", "8", "-tied", "-bucket", "4000", "-grad-fp8", "E5M2"},
			tied.Params(), optimizer.Config{GradBuffers: 3}, fp8grad.Config{Format: fp8.E5M2}},
	}
	for _, sh := range shapes {
		for _, d := range []int{1, 2, 4} {
			for _, sharded := range []bool{false, true} {
				for _, ef := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s d=%d sharded=%v ef=%v", sh.name, d, sharded, ef), func(t *testing.T) {
						args := append([]string{"-d", fmt.Sprint(d), "-bytes", "-exact-avg"}, sh.args...)
						cfg, fc := sh.cfg, sh.fc
						cfg.Layout.BucketElements = atoiArg(t, args, "-bucket")
						cfg.LR = optimizer.Constant(1e-3)
						if sharded {
							args = append(args, "-sharded-grads")
							if cfg.GradBuffers > 0 {
								args = append(args, "-grad-buffers", fmt.Sprint(cfg.GradBuffers))
							}
							cfg.ShardedGradients = true
						} else {
							cfg.GradBuffers = 0
						}
						if ef {
							args = append(args, "-grad-ef")
							fc.ErrorFeedback = true
						}
						buffers, _ := planOutput(t, []int{d}, args...)
						live := runFP8(t, sh.params, d, cfg, fc)
						checkFP8Rows(t, buffers, live, fc, sharded)
					})
				}
			}
		}
	}
}

// checkFP8Rows compares the plan's rows of one d with a live run.
func checkFP8Rows(t *testing.T, buffers map[string][]string, live liveFP8, fc fp8grad.Config, sharded bool) {
	t.Helper()
	if len(live.buckets) < 2 {
		t.Fatalf("%d buckets, want several", len(live.buckets))
	}
	residual := atoi64(t, buffers[rowFP8Residual][0])
	if residual != int64(live.residual) {
		t.Errorf("residual row %d bytes, the live Comm holds %d", residual, live.residual)
	}
	s := fp8grad.Steps{Ranks: live.ranks}
	for b := len(live.buckets) - 1; b >= 0; b-- {
		s.Buckets = append(s.Buckets, live.buckets[b])
	}
	if sharded {
		s.InFlight = live.gradBufs
	}
	want, err := fp8grad.PredictSteps(s, fc)
	if err != nil {
		t.Fatal(err)
	}
	staging := atoi64(t, buffers[rowFP8Staging][0])
	if staging != want.Staging || staging == 0 {
		t.Errorf("staging row %d bytes, PredictSteps over the live buckets %d", staging, want.Staging)
	}
	if s := atoi64(t, buffers["nccl scratch"][0]); s != 0 {
		t.Errorf("nccl scratch %d with FP8 gradients", s)
	}
	if got, sum := atoi64(t, buffers["total (device)"][0]), live.reportSize+staging+residual; got != sum {
		t.Errorf("total %d, optimizer report %d + staging + residual = %d", got, live.reportSize, sum)
	}
}

// atoiArg returns the integer after name in args (0 when absent).
func atoiArg(t *testing.T, args []string, name string) int {
	for i, a := range args {
		if a == name {
			return int(atoi64(t, args[i+1]))
		}
	}
	return 0
}

// TestPlanGradFP8Absent: without -grad-fp8 the table has no FP8 rows, and
// the configuration line and the chart's legend name the mode only with
// it.
func TestPlanGradFP8Absent(t *testing.T) {
	buffers, _ := planOutput(t, []int{8}, "-d", "8")
	for _, row := range []string{rowFP8Staging, rowFP8Residual} {
		if _, ok := buffers[row]; ok {
			t.Errorf("row %q without -grad-fp8", row)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"-grad-fp8", "e5m2", "-grad-ef"}, "FP8 gradient reduce-scatter E5M2 in blocks of 128 with error feedback"},
	} {
		o, err := parsePlan(append([]string{"-d", "8"}, tc.args...), nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := makePlan(o)
		if err != nil {
			t.Fatal(err)
		}
		lines := p.chartLines()
		legend := lines[len(lines)-1].name
		if tc.want == "" && (strings.Contains(p.config, "FP8 gradient") || strings.Contains(legend, "FP8 gradient")) {
			t.Errorf("no -grad-fp8: config %q, legend %q", p.config, legend)
		}
		if tc.want != "" && (!strings.Contains(p.config, tc.want) || !strings.Contains(legend, tc.want)) {
			t.Errorf("%q: config %q, legend %q, want %q in both", tc.args, p.config, legend, tc.want)
		}
	}
}

// TestPlanScratchSharded checks the NCCL scratch of -exact-avg with
// sharded gradients against collective/nccl's growth of its one scratch
// area, worked out by hand: each bucket is a group of its own, started
// last bucket first. For the tied 2-layer GPT below at d = 2 the buckets
// are, in order, 2560 512 1152 6912 2304 4608 4608 6912 2304 4608 4608
// elements: the last (4608, 18432 bytes widened) makes the area, the
// first 6912 needs 27648 = 1.5 x 18432 and gets a new area of that size,
// the old one kept: 46080 bytes, where every bucket widened at once (the
// full gradient buffers' one group) is 4 x 41088 = 164352. For the 1.3B
// GPT at d = 8 the last bucket (the head, 103022592 elements) is the
// largest: 4 bytes per element of it. The comparison row of the other
// gradient option is that option's own total, scratch included.
func TestPlanScratchSharded(t *testing.T) {
	tied := []string{"-layers", "2", "-hidden", "48", "-ffn", "96", "-vocab", "50", "-positions", "8", "-tied", "-bucket", "2048", "-exact-avg", "-bytes", "-d", "2"}
	l, err := optimizer.NewLayout(plan.GPTConfig{Layers: 2, Hidden: 48, FFN: 96, Vocab: 50, Positions: 8, Tied: true}.Params(), 2, shard.Options{BucketElements: 2048})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []string
	for _, b := range l.Buckets {
		sizes = append(sizes, fmt.Sprint(b.Size))
	}
	if got := strings.Join(sizes, " "); got != "2560 512 1152 6912 2304 4608 4608 6912 2304 4608 4608" {
		t.Fatalf("buckets %s: the case below was worked out for others", got)
	}
	for _, tc := range []struct {
		args []string
		want int64
	}{
		{tied, 164352},
		{append(tied, "-sharded-grads"), 46080},
		{[]string{"-exact-avg", "-bytes", "-d", "8", "-sharded-grads"}, 4 * 103022592},
	} {
		buffers, _ := planOutput(t, []int{1}, tc.args...)
		if got := atoi64(t, buffers["nccl scratch"][0]); got != tc.want {
			t.Errorf("%q: nccl scratch %d bytes, want %d", tc.args, got, tc.want)
		}
	}
	for _, sharded := range []bool{false, true} {
		args, other, row := []string{"-exact-avg", "-d", "8"}, []string{"-exact-avg", "-d", "8", "-sharded-grads"}, "distopt, sharded gradients (-sharded-grads) exact"
		if sharded {
			args, other, row = other, args, "distopt, full gradient buffers exact"
		}
		_, comparison := planOutput(t, []int{8}, args...)
		_, own := planOutput(t, []int{8}, other...)
		if got, want := comparison[row][0], own["distopt, this configuration (exact) as above"][0]; got != want {
			t.Errorf("sharded %v: other option %s GiB, its own plan %s", sharded, got, want)
		}
	}
}

// TestPlanGradFP8Readme checks the README's figures for the 1.3B GPT at d
// = 8: the staging is 2.06 bytes per parameter and rank with full gradient
// buffers and 0.45 with sharded ones, the residuals 4.00, and the closed
// form's full-buffer staging term, 2 x (1 + 4/128), is within 0.01 of the
// exact figure.
func TestPlanGradFP8Readme(t *testing.T) {
	n := float64(0)
	for _, p := range plan.GPT13B.Params() {
		n += float64(optimizertest.Numel(p.Shape))
	}
	for _, tc := range []struct {
		sharded           bool
		staging, residual string
	}{{false, "2.06", "4.00"}, {true, "0.45", "4.00"}} {
		args := []string{"-d", "8", "-bytes", "-grad-fp8", "e4m3", "-grad-ef"}
		if tc.sharded {
			args = append(args, "-sharded-grads")
		}
		buffers, _ := planOutput(t, []int{8}, args...)
		s, r := float64(atoi64(t, buffers[rowFP8Staging][0]))/n, float64(atoi64(t, buffers[rowFP8Residual][0]))/n
		if got := fmt.Sprintf("%.2f", s); got != tc.staging {
			t.Errorf("sharded %v: staging %s bytes/param, README says %s", tc.sharded, got, tc.staging)
		}
		if got := fmt.Sprintf("%.2f", r); got != tc.residual {
			t.Errorf("sharded %v: residuals %s bytes/param, README says %s", tc.sharded, got, tc.residual)
		}
		if !tc.sharded && math.Abs(s-2*fp8grad.WireBytesPerElement(128)) > 0.01 {
			t.Errorf("staging %.4f bytes/param, closed form %.4f", s, 2*fp8grad.WireBytesPerElement(128))
		}
	}
}

// TestPlanLayout checks planLayout, which the FP8 rows and the NCCL
// scratch are computed over, against the layout of a live optimizer of the
// same configuration (FP8 moments change the alignment of high-precision
// parameters): the same buckets, sizes and places.
func TestPlanLayout(t *testing.T) {
	params := plan.GPTConfig{Layers: 1, Hidden: 40, FFN: 80, Vocab: 30, Positions: 8}.Params()
	for _, cfg := range []optimizer.Config{
		{},
		{FirstMomentType: optimizer.MomentFP8, SecondMomentType: optimizer.MomentFP8},
		{FirstMomentType: optimizer.MomentFP8, SecondMomentType: optimizer.MomentBFloat16, MomentBlock: 32},
		{Rule: optimizer.RuleSGD, Momentum: 0.9, FirstMomentType: optimizer.MomentFP8, MomentBlock: 64},
	} {
		cfg.Layout.BucketElements = 3000
		cfg.LR = optimizer.Constant(1e-3)
		got, err := planLayout(params, 1, cfg)
		if err != nil {
			t.Fatal(err)
		}
		init := map[string][]float32{}
		for _, p := range params {
			init[p.Name] = make([]float32, optimizertest.Numel(p.Shape))
		}
		o, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(init), cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := o.Layout()
		o.Close()
		if fmt.Sprint(got.Buckets) != fmt.Sprint(want.Buckets) || fmt.Sprint(got.Places) != fmt.Sprint(want.Places) {
			t.Errorf("%+v: planLayout\n%v\n%v\nthe optimizer's\n%v\n%v", cfg, got.Buckets, got.Places, want.Buckets, want.Places)
		}
	}
}

// TestPlanGradFP8ClosedFormSharded checks that with sharded gradients the
// closed form's FP8 term is the pool's exact staging (a buffer per bucket
// size in flight), so that it and the exact total agree up to padding and
// scales: before, the closed form counted GradBuffers of the largest
// bucket only, 0.30 bytes per parameter against the exact 0.45 (1.3B GPT,
// d = 8).
func TestPlanGradFP8ClosedFormSharded(t *testing.T) {
	for _, ef := range []bool{false, true} {
		args := []string{"-d", "1,8", "-grad-fp8", "e4m3", "-sharded-grads"}
		if ef {
			args = append(args, "-grad-ef")
		}
		o, err := parsePlan(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		p, err := makePlan(o)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range o.ds {
			exact := float64(p.total(i)-p.scratch[i]) / float64(p.n)
			if got := p.closedForm(d); math.Abs(got-exact) > 0.005 {
				t.Errorf("error feedback %v, d=%d: closed form %.4f, exact %.4f bytes/param", ef, d, got, exact)
			}
		}
	}
}
