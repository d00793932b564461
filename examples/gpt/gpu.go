package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/gpumodel"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
	"github.com/distopt/distopt/optimizer/gpu"
)

// peakBF16 is the dense BF16 tensor-core peak of an H100/H200 SXM (FLOP/s),
// the denominator of the MFU printed (PaLM's definition, as nanoGPT).
const peakBF16 = 989e12

// gpuRun trains on GPUs: one process per GPU under `distopt run` (the
// launcher's environment: NCCL between the ranks), or GPU 0 alone.
func gpuRun(o options, out io.Writer) ([]float64, error) {
	c, err := readCorpus(o.data, o.shape.Vocab)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	var (
		be   *gpu.Backend
		comm collective.Communicator
	)
	if os.Getenv("WORLD_SIZE") != "" {
		r, err := gpu.SetupFromEnv(ctx, nccl.Config{})
		if err != nil {
			return nil, err
		}
		defer r.Close()
		be, comm = r.Backend, r.Comm
	} else {
		if be, err = gpu.New(0); err != nil {
			return nil, err
		}
		defer be.Close()
		comm = single.New(collective.Device, nil)
	}
	if comm.Rank() != 0 {
		out = io.Discard
	}
	loader := data.Loader{Tokens: c.train, Seq: o.shape.Seq, Batch: o.batch, World: comm.Size(), MicroBatches: o.micro, Seed: o.seed}
	if err := loader.Validate(); err != nil {
		return nil, err
	}
	cfg := o.config()
	cfg.GradType, cfg.MicroBatches = collective.Float32, o.micro
	opt, err := optimizer.New(ctx, comm, be, o.shape.Params(), o.shape.Init(), cfg)
	if err != nil {
		return nil, err
	}
	defer opt.Close()
	e, err := gemm.New(be.Device(), be.Stream())
	if err != nil {
		return nil, err
	}
	defer e.Close()
	k, err := kernels.Load(be.Device())
	if err != nil {
		return nil, err
	}
	defer k.Close()
	m, err := gpumodel.New(e, k, o.shape, o.batch, o.shape.Seq)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if o.resume {
		info, err := checkpoint.Load(ctx, opt, comm, o.ckpt, checkpoint.LoadOptions{})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "resumed from %s (step %d, saved on %d ranks)\n", info.Dir, info.Step, info.World)
	}
	fmt.Fprintf(out, "gpt on %d GPU(s) (%s): %d parameters, %d x %d x %d sequences of %d per step; optimizer %.1f MiB per rank\n",
		comm.Size(), be.Name(), o.shape.NumParams(), comm.Size(), o.micro, o.batch, o.shape.Seq, float64(opt.Report().Total())/(1<<20))
	return gpuLoop(ctx, o, opt, comm, be, m, loader, c.valid, out)
}

// gpuLoop runs the steps from the optimizer's step count to o.steps.
func gpuLoop(ctx context.Context, o options, opt *optimizer.Optimizer, comm collective.Communicator, be *gpu.Backend,
	m *gpumodel.Model, loader data.Loader, valid []uint16, out io.Writer) ([]float64, error) {
	var losses []float64
	n := loader.Batch * loader.Seq
	in, tg := make([]int32, n), make([]int32, n)
	for step := opt.StepCount(); step < o.steps; step++ {
		start := time.Now()
		if err := opt.WaitGathers(ctx); err != nil {
			return losses, err
		}
		if err := m.ZeroGrads(opt.Grad); err != nil {
			return losses, err
		}
		loss := 0.0
		for micro := range o.micro {
			loader.MicroBatch(in, tg, step, comm.Rank(), micro)
			if err := m.Forward(opt.Param, in, tg, 1/float64(o.micro)); err != nil {
				return losses, err
			}
			if err := m.Backward(opt.Param, opt.Grad, opt.GradReady); err != nil {
				return losses, err
			}
			l, err := m.Loss()
			if err != nil {
				return losses, err
			}
			loss += l / float64(o.micro)
		}
		res, err := opt.StepAsync(ctx)
		if err != nil {
			return losses, fmt.Errorf("step %d: %w", step+1, err)
		}
		if loss, err = opt.MeanOverRanks(ctx, loss); err != nil {
			return losses, err
		}
		if err := be.Sync(); err != nil {
			return losses, err
		}
		losses = append(losses, loss)
		dt := time.Since(start).Seconds()
		tokens := float64(loader.Global() * loader.Seq)
		free, total, _ := be.Device().MemInfo()
		fmt.Fprintf(out, "step %5d/%d  loss %.4f  lr %.2e  grad norm %.3f  %8.0f tokens/s  MFU %.1f%%  %.0f ms  GPU memory %.2f GiB\n",
			step+1, o.steps, loss, o.config().LR.LR(step+1), res.GradNorm, tokens/dt,
			100*tokens*o.shape.FlopsPerToken()/dt/peakBF16/float64(comm.Size()), 1000*dt, float64(total-free)/(1<<30))
		last := step+1 == o.steps || step+1 == o.stopAfter
		if (o.evalEvery > 0 && (step+1)%o.evalEvery == 0) || last {
			v, err := gpuValidLoss(ctx, opt, m, loader, valid, o.evalWindows)
			if err != nil {
				return losses, err
			}
			fmt.Fprintf(out, "step %5d  validation loss %.4f (%.3f bits per byte)\n", step+1, v, v/math.Ln2)
		}
		if o.ckpt != "" && ((o.ckptEvery > 0 && (step+1)%o.ckptEvery == 0) || last) {
			if err := saveCheckpoint(ctx, out, opt, comm, o.ckpt); err != nil {
				return losses, err
			}
		}
		if last {
			break
		}
	}
	return losses, nil
}

// gpuValidLoss is the mean loss over the first windows validation
// sequences, Batch at a time (windows rounded down to a multiple of Batch).
func gpuValidLoss(ctx context.Context, opt *optimizer.Optimizer, m *gpumodel.Model, l data.Loader, valid []uint16, windows int) (float64, error) {
	if err := opt.WaitGathers(ctx); err != nil {
		return 0, err
	}
	groups := windows / l.Batch
	if groups < 1 {
		return 0, errors.New("-eval-windows must be at least -batch on the GPU")
	}
	n := l.Batch * l.Seq
	in, tg := make([]int32, n), make([]int32, n)
	total := 0.0
	for g := range groups {
		for b := range l.Batch {
			data.Window(in[b*l.Seq:], tg[b*l.Seq:], valid, l.Seq, g*l.Batch+b)
		}
		if err := m.Forward(opt.Param, in, tg, 0); err != nil {
			return 0, err
		}
		v, err := m.Loss()
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total / float64(groups), nil
}
