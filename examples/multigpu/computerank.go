package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// runComputeRank is runRank for -compute gemm: the optimizer on the GPU
// backend itself (no phaseSync: the overlapped pipeline needs the
// backend's device ordering), the GEMMs of every linear layer on its
// stream, and the four passes of measurer.
func runComputeRank(ctx context.Context, j *job, o options, out io.Writer) (_ *rankSummary, err error) {
	gb, ok := j.be.(*gpu.Backend)
	if !ok {
		return nil, fmt.Errorf("-compute gemm needs the GPU backend, not %s", j.be.Name())
	}
	params := o.gpt.Params()
	cfg := o.config()
	cfg.MicroBatches = o.micro
	pred, err := optimizer.PredictMemory(params, j.size, cfg)
	if err != nil {
		return nil, err
	}
	comp, err := newGEMMCompute(gb, params, o.recipe, o.grads.Tokens, gradSeed(o.seed, j.rank, 0))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, comp.Close()) }()
	rec := &recorder{Communicator: j.comm}
	opt, err := optimizer.New(ctx, rec, gb, params, initValues(o.gpt.Layers), cfg)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, opt.Close()) }()
	clk := &eventClock{d: gb.Device(), s: gb.Stream()}
	defer func() { err = errors.Join(err, clk.Close()) }()
	fmt.Fprintf(out, "%d parameters, %d ranks, %s; -compute gemm: %d linear layers, %d tokens x %d micro-batches per step, %d buckets\n",
		o.gpt.NumParams(), j.size, gb.Name(), len(comp.lins), o.grads.Tokens, o.micro, len(opt.Layout().Buckets))
	m := &measurer{t: &trainer{opt: opt, params: params, comp: comp, micro: o.micro}, rec: rec, clk: clk, syncs: gb.Device().HostSyncs, n: o.steps}
	ov, err := m.run(ctx, o.warmup)
	if err != nil {
		return nil, err
	}
	ov.Tokens = o.grads.Tokens
	kept, scratch := comp.KeptBytes()
	fmt.Fprintf(out, "FP8 activations kept %.3f GiB, GEMM scratch %.3f GiB; %d collective groups per step\n", gib(int64(kept)), gib(int64(scratch)), len(rec.recorded()))
	writeIterations(out, ov)
	res, err := opt.LastResult()
	if err != nil {
		return nil, err
	}
	return &rankSummary{Rank: j.rank, World: j.size, Backend: gb.Name(), Params: o.gpt.NumParams(), Predicted: pred.Total(),
		Buffers: pred.Buffers, GradNorm: res.GradNorm, ExpectedGradNorm: expectedGEMMNorm(params, o.grads.Tokens, o.micro, j.size), Overlap: ov}, nil
}

// writeIterations prints one line per timed iteration of each pass, and
// the exposed communication of the overlapped one.
func writeIterations(w io.Writer, r *overlapRank) {
	for k := range r.IterMs {
		e := account(r.ComputeMs[k], r.CommMs[k], r.StepMs[k], r.IterMs[k])
		fmt.Fprintf(w, "iteration %3d/%d compute %8.2f  comm %7.2f  step %7.2f (optimizer %6.2f)  overlapped %8.2f ms | exposed %7.2f ms = %5.1f%% of comm, iteration %+5.1f%% of compute + optimizer\n",
			k+1, len(r.IterMs), e.Compute, e.Comm, e.Step, e.Optimizer, e.Iteration, e.Exposed, 100*e.ExposedFraction(), 100*e.Overhead())
	}
	m := r.Medians
	fmt.Fprintf(w, "medians: compute %.3f ms, comm %.3f ms, step %.3f ms, optimizer %.3f ms, overlapped %.3f ms, exposed %.3f ms (%.1f%% of comm), %.2f host syncs per iteration\n",
		m.Compute, m.Comm, m.Step, m.Optimizer, m.Iteration, m.Exposed, 100*m.ExposedFraction(), r.HostSyncs)
}
