package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/gpumodel"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// peakBF16 is the dense BF16 tensor-core peak of an H100/H200 SXM (FLOP/s),
// the denominator of the MFU printed (PaLM's definition, as nanoGPT):
// MFU = tokens/s x model.Config.FlopsPerToken / (GPUs x peakBF16).
// scripts/gpt/torch_gpt.py divides by the same peak and counts the same
// FLOPs. It is the BF16 peak on purpose, although the linear layers run
// in FP8: the same yardstick for both.
const peakBF16 = 989e12

// gpuTrainer is what the GPU training loop works with.
type gpuTrainer struct {
	first  int // the first step this process runs (after a resume: the checkpoint's)
	o      options
	opt    *optimizer.Optimizer
	comm   collective.Communicator
	be     *gpu.Backend
	m      *gpumodel.Model
	loader data.Loader
	valid  []uint16
	rec    *recorder
	out    io.Writer
	prof   *gpumodel.Profiler // -profile, or nil
}

// gpuRun trains on GPUs: one process per GPU under `distopt run` (the
// launcher's environment: NCCL between the ranks), or GPU 0 alone.
func gpuRun(o options, out io.Writer) ([]float64, error) {
	c, err := readCorpus(o.data, o.shape.Vocab)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	be, comm, closeDevice, err := openDevice(ctx)
	if err != nil {
		return nil, err
	}
	defer closeDevice()
	if o.grads != nil {
		g, err := gpu.FP8Gradients(be, comm, *o.grads)
		if err != nil {
			return nil, err
		}
		// Before closeDevice: frees the wrapper's device memory and closes
		// comm, which closeDevice's second Close then finds closed.
		defer g.Close()
		comm = g
	}
	if comm.Rank() != 0 {
		out = io.Discard
	}
	if o.grads != nil {
		fmt.Fprintf(out, "gradients reduce-scattered in %v, blocks of %d, error feedback %t\n", o.grads.Format, o.grads.Block, o.grads.ErrorFeedback)
	}
	loader := data.Loader{Tokens: c.train, Seq: o.shape.Seq, Batch: o.batch, World: comm.Size(), MicroBatches: o.micro, Seed: o.seed}
	if err := loader.Validate(); err != nil {
		return nil, err
	}
	if w := data.ValidWindows(c.valid, o.shape.Seq); w < o.evalWindows || o.evalWindows < o.batch {
		return nil, fmt.Errorf("-eval-windows %d: want at least -batch (%d) and at most the %d validation sequences of %d", o.evalWindows, o.batch, w, o.shape.Seq)
	}
	cfg := o.gpuConfig()
	opt, err := optimizer.New(ctx, comm, be, o.shape.Params(), o.shape.Init(), cfg)
	if err != nil {
		return nil, err
	}
	defer opt.Close()
	m, attention, closeModel, err := newGPUModel(o, be)
	if err != nil {
		return nil, err
	}
	defer closeModel()
	fmt.Fprintf(out, "attention: %s\n", attention)
	if comm.Rank() != 0 { // out is discarded there: a rank's own choice still shows
		fmt.Fprintf(os.Stderr, "rank %d: attention: %s\n", comm.Rank(), attention)
	}
	if err := resume(ctx, o, out, opt, comm, func(state []byte) error { return setModelState(o, m, state) }); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "gpt on %d GPU(s) (%s): %d parameters, %d x %d x %d sequences of %d per step, recipe %s, %s, head %v, gradients %v; optimizer %.1f MiB per rank\n",
		comm.Size(), be.Name(), o.shape.NumParams(), comm.Size(), o.micro, o.batch, o.shape.Seq, fp8.RecipeName(o.recipe.Scaling), o.activationScaling(), o.head, o.gradType,
		float64(opt.Report().Total())/(1<<20))
	rec := &recorder{path: o.curvePath, flopsPerToken: o.shape.FlopsPerToken(), gpus: comm.Size()}
	rec.config(o, o.evalWindows/o.batch*o.batch)
	if comm.Rank() != 0 {
		rec.path = ""
	}
	t := &gpuTrainer{o: o, opt: opt, comm: comm, be: be, m: m, loader: loader, valid: c.valid, rec: rec, out: out}
	if o.profile {
		t.prof = gpumodel.NewProfiler(be.Device(), be.Stream())
		defer t.prof.Close()
	}
	losses, err := t.loop(ctx)
	if err != nil {
		return losses, err
	}
	if err := rec.write(); err != nil {
		return losses, err
	}
	if o.sampleLen > 0 && comm.Rank() == 0 {
		if err := t.sample(ctx); err != nil {
			return losses, err
		}
	}
	return losses, nil
}

// gpuConfig is the optimizer's configuration on the GPU path: config's,
// with the gradients in -grad-type and the micro-batches counted.
func (o options) gpuConfig() optimizer.Config {
	cfg := o.config()
	cfg.GradType, cfg.MicroBatches = o.gradType, o.micro
	return cfg
}

// modelOptions are the GPU model's options of o.
func (o options) modelOptions() gpumodel.Options {
	return gpumodel.Options{Recipe: o.recipe, Recompute: o.recompute, KeepTransposed: o.keepTransposed, KeepTransposedLayers: o.keepLayers,
		Attention: o.attention, Head: o.head, GradType: o.gradType, Epilogue: o.epilogue, ActGradBF16: o.actGradBF16, FuseDY: o.fuseDY,
		DelayedActivations: o.actHistory}
}

// newGPUModel makes the model of o on be's device and stream: its GEMM
// engine, its kernels and its activations, and says which attention it
// runs (openAttention). The returned function frees them, model first.
func newGPUModel(o options, be *gpu.Backend) (*gpumodel.Model, string, func(), error) {
	e, err := gemm.New(be.Device(), be.Stream())
	if err != nil {
		return nil, "", nil, err
	}
	// The flash kernels' JIT costs a fresh machine seconds: loaded only if
	// the model takes them (gpumodel calls LoadFlash).
	k, err := kernels.LoadWithoutFlash(be.Device())
	if err != nil {
		e.Close()
		return nil, "", nil, err
	}
	m, note, err := openAttention(o, func(a gpumodel.Attention) (*gpumodel.Model, error) {
		opts := o.modelOptions()
		opts.Attention = a
		return gpumodel.NewWith(e, k, o.shape, o.batch, o.shape.Seq, opts)
	})
	if err != nil {
		k.Close()
		e.Close()
		return nil, "", nil, err
	}
	if n := m.AttentionNote(); n != "" {
		note += " (" + n + ")"
	}
	return m, note, func() { m.Close(); k.Close(); e.Close() }, nil
}

// openDevice opens this process's GPU and its communicator: the
// launcher's rank under `distopt run` (NCCL), or GPU 0 alone.
func openDevice(ctx context.Context) (*gpu.Backend, collective.Communicator, func() error, error) {
	if os.Getenv("WORLD_SIZE") != "" {
		r, err := gpu.SetupFromEnv(ctx, nccl.Config{})
		if err != nil {
			return nil, nil, nil, err
		}
		return r.Backend, r.Comm, r.Close, nil
	}
	be, err := gpu.New(0)
	if err != nil {
		return nil, nil, nil, err
	}
	return be, single.New(buffer.Device, streamCopier(be.Stream())), be.Close, nil
}

// streamCopier copies between device buffers on s, for the one-rank
// communicator's out-of-place operations (the checkpoint's exchanges).
func streamCopier(s *cuda.Stream) single.Copier {
	return func(dst, src buffer.Buffer) error {
		d, ok1 := dst.(buffer.DeviceBuffer)
		b, ok2 := src.(buffer.DeviceBuffer)
		if !ok1 || !ok2 {
			return fmt.Errorf("gpt: copy from %T to %T: want device buffers", src, dst)
		}
		if b.Size != d.Size {
			return fmt.Errorf("gpt: copy of %d bytes into %d", b.Size, d.Size)
		}
		return s.CopyDtoD(cuda.DevicePtr(d.Ptr), cuda.DevicePtr(b.Ptr), d.Size)
	}
}

// stepTimes are the host times of one step's phases.
type stepTimes struct {
	// wait is spent in WaitGathers (the previous step's all-gathers not
	// yet done), fwdBwd in the forward and backward passes up to the
	// last micro-batch's loss read back (a host-device synchronization,
	// so it covers their device time) less the StepAsync queued before
	// that read, step in StepAsync (the optimizer's host work). The mean
	// over ranks and LastResult after it wait for the update and cast on
	// the device: that wait is in none of the three. queue is the host
	// time spent queueing the forward and backward passes (within fwdBwd):
	// near fwdBwd, the host, not the device, sets the step's pace.
	wait, fwdBwd, step, queue time.Duration
}

// loop runs the steps from the optimizer's step count to o.steps (or
// o.stopAfter) and returns rank 0's training losses.
func (t *gpuTrainer) loop(ctx context.Context) ([]float64, error) {
	o := t.o
	var losses []float64
	prev := time.Now() // the end of the previous step: the step time is the whole iteration's
	t.first = t.opt.StepCount()
	for step := t.first; step < o.steps; step++ {
		sctx, cancel := context.WithTimeout(ctx, o.timeout)
		loss, res, ph, err := t.step(sctx, step)
		cancel()
		if err == nil {
			err = skipped(res)
		}
		if err != nil {
			return losses, fmt.Errorf("step %d: %w", step+1, err)
		}
		losses = append(losses, loss)
		now := time.Now()
		dt := now.Sub(prev).Seconds()
		tokens := float64(t.loader.Global() * t.loader.Seq)
		t.rec.step(step+1, loss, dt, tokens)
		fmt.Fprintf(t.out, "step %5d/%d  loss %.4f  lr %.2e  grad norm %.3f  %8.0f tokens/s  MFU %.1f%%  %.1f ms (wait %.1f, fwd+bwd %.1f of which queueing %.1f, step %.1f)  %s\n",
			step+1, o.steps, loss, o.config().LR.LR(step+1), res.GradNorm, tokens/dt,
			100*tokens*o.shape.FlopsPerToken()/dt/peakBF16/float64(t.comm.Size()), 1000*dt,
			ms(ph.wait), ms(ph.fwdBwd), ms(ph.queue), ms(ph.step), t.memory())
		if step == t.first {
			t.prof.Reset() // the first step makes the GEMMs' plans and allocates
			t.activations()
		}
		last := step+1 == o.steps || step+1 == o.stopAfter
		if (o.evalEvery > 0 && (step+1)%o.evalEvery == 0) || last {
			var v float64
			err := within(ctx, o.timeout, func(ctx context.Context) (err error) {
				v, err = t.validLoss(ctx)
				return err
			})
			if err != nil {
				return losses, err
			}
			fmt.Fprintf(t.out, "step %5d  validation loss %.4f (%.3f bits per byte)\n", step+1, v, v/math.Ln2)
			if err := t.rec.valid(step+1, v); err != nil {
				return losses, err
			}
		}
		if o.ckpt != "" && ((o.ckptEvery > 0 && (step+1)%o.ckptEvery == 0) || last) {
			if err := within(ctx, o.timeout, func(ctx context.Context) error {
				state, err := t.m.DelayedActivationState()
				if err != nil {
					return err
				}
				return saveCheckpoint(ctx, t.out, t.opt, t.comm, o.ckpt, state)
			}); err != nil {
				return losses, err
			}
		}
		if last {
			break
		}
		prev = time.Now() // evaluations and checkpoints are not the next step's time
	}
	if t.prof == nil {
		return losses, nil
	}
	if _, n := t.prof.Totals(); n == 0 { // a resumed run of one step
		fmt.Fprintf(t.out, "profile: no step after this run's first\n")
		return losses, nil
	}
	fmt.Fprintf(t.out, "profile: device time per step by phase (CUDA events on the compute stream, the first step left out)\n")
	return losses, t.prof.WriteTable(t.out)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// within runs fn under a deadline d after now (-step-timeout).
func within(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return fn(ctx)
}

// activations prints, after the first step, the model's activation memory
// per layer and per micro-batch as allocated (gpumodel.Model.Memory: what
// each block keeps from forward to backward, by kind) and whether it is
// what PredictMemory says.
func (t *gpuTrainer) activations() {
	r, err := t.m.Memory()
	if err != nil {
		fmt.Fprintf(t.out, "activations: %v\n", err)
		return
	}
	verdict := "as predicted"
	if r.Allocated != r.Predicted {
		verdict = "predicted: " + r.Predicted.String()
	}
	fmt.Fprintf(t.out, "activations: %s; %s\n", r.Allocated, verdict)
}

// step runs one optimizer step (0-based): forward and backward passes of
// every micro-batch, gradients written into the optimizer's views by the
// first (gpumodel.Model.BackwardInto) and added by the others, handed
// over as the backward pass finishes each, then StepAsync. The
// loss is averaged over micro-batches and ranks.
func (t *gpuTrainer) step(ctx context.Context, step int) (float64, optimizer.StepResult, stepTimes, error) {
	var ph stepTimes
	if t.prof != nil { // the steps' work only, not the evaluations'
		t.m.SetProfiler(t.prof)
		defer t.m.SetProfiler(nil)
	}
	start := time.Now()
	if err := t.opt.WaitGathers(ctx); err != nil {
		return 0, optimizer.StepResult{}, ph, err
	}
	ph.wait = time.Since(start)
	start = time.Now()
	n := t.loader.Batch * t.loader.Seq
	in, tg := make([]int32, n), make([]int32, n)
	pend := make([]*gpumodel.PendingLoss, 0, t.o.micro)
	for micro := range t.o.micro {
		t.loader.MicroBatch(in, tg, step, t.comm.Rank(), micro)
		if err := t.m.Forward(t.opt.Param, in, tg, 1/float64(t.o.micro)); err != nil {
			return 0, optimizer.StepResult{}, ph, err
		}
		backward := t.m.Backward
		if micro == 0 { // the step's first: its gradients are written, not added (no ZeroGrads)
			backward = t.m.BackwardInto
		}
		if err := backward(t.opt.Param, t.opt.Grad, t.opt.GradReady); err != nil {
			return 0, optimizer.StepResult{}, ph, err
		}
		p, err := t.m.LossLater() // no wait: the next micro-batch is queued behind this one
		if err != nil {
			return 0, optimizer.StepResult{}, ph, err
		}
		pend = append(pend, p)
	}
	queued := time.Now()
	ph.queue = queued.Sub(start)
	t.prof.Mark(gpumodel.PhaseOptimizer)
	res, err := t.opt.StepAsync(ctx)
	if err != nil {
		return 0, res, ph, err
	}
	ph.step = time.Since(queued)
	// The losses come back while the optimizer's step runs on the device:
	// the step's host-device synchronization.
	loss := 0.0
	for _, p := range pend {
		l, err := p.Value()
		if err != nil {
			return 0, res, ph, err
		}
		loss += l / float64(t.o.micro)
	}
	ph.fwdBwd = time.Since(start) - ph.step
	loss, err = t.opt.MeanOverRanks(ctx, loss)
	if err == nil && res.Pending { // the decision stayed on the GPU: read it for the log and the skip check
		tm := res.Timings
		res, err = t.opt.LastResult()
		res.Timings = tm
	}
	if err == nil && t.prof != nil {
		err = t.prof.Collect()
	}
	return loss, res, ph, err
}

// memory records and formats the device memory: what this process
// allocated through its device (the model's buffers, the optimizer's
// state and buffers, the GEMM workspaces) and what the driver reports in
// use on the whole device (other processes included).
func (t *gpuTrainer) memory() string {
	alloc := int64(t.be.Device().Usage().DeviceBytes)
	free, total, err := t.be.Device().MemInfo()
	used := int64(total - free)
	if err != nil {
		used = -1
	}
	t.rec.memory(alloc, used)
	s := fmt.Sprintf("memory %.2f GiB allocated, %.2f GiB in use on the device", gib(alloc), gib(used))
	if r, err := t.m.Memory(); err == nil {
		s += fmt.Sprintf(", activations %.2f GiB", gib(int64(r.Allocated.Step())))
	}
	return s
}

func gib(b int64) float64 { return float64(b) / (1 << 30) }

// validLoss is the mean loss over o.evalWindows validation sequences
// rounded down to a multiple of Batch (those of data.EvalWindows for that
// count), Batch at a time.
func (t *gpuTrainer) validLoss(ctx context.Context) (float64, error) {
	if err := t.opt.WaitGathers(ctx); err != nil {
		return 0, err
	}
	l := t.loader
	groups := t.o.evalWindows / l.Batch
	if groups < 1 {
		return 0, errors.New("-eval-windows must be at least -batch on the GPU")
	}
	ks, err := data.EvalWindows(groups*l.Batch, data.ValidWindows(t.valid, l.Seq), t.o.evalSpread)
	if err != nil {
		return 0, err
	}
	n := l.Batch * l.Seq
	in, tg := make([]int32, n), make([]int32, n)
	total := 0.0
	for g := range groups {
		for b := range l.Batch {
			data.Window(in[b*l.Seq:], tg[b*l.Seq:], t.valid, l.Seq, ks[g*l.Batch+b])
		}
		if err := t.m.Forward(t.opt.Param, in, tg, 0); err != nil {
			return 0, err
		}
		v, err := t.m.Loss()
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total / float64(groups), nil
}

// sample prints o.sampleLen bytes generated from o.prompt by the model on
// the GPU (generate, the CPU path's sampler, on gpuNext's logits).
func (t *gpuTrainer) sample(ctx context.Context) error {
	if err := t.opt.WaitGathers(ctx); err != nil {
		return err
	}
	text, err := generate(t.gpuNext(), []byte(t.o.prompt), t.o.sampleLen, t.loader.Seq, t.o.seed)
	if err != nil {
		return err
	}
	fmt.Fprintf(t.out, "sample:\n%s\n", printable(text))
	return nil
}

// gpuNext runs the model on a batch whose row 0 starts with the context
// (packContext) and reads the logits of its last position.
func (t *gpuTrainer) gpuNext() nextLogits {
	v := t.o.shape.Vocab
	in := make([]int32, t.loader.Batch*t.loader.Seq)
	logits := make([]float32, len(in)*v)
	return func(context []int32) ([]float64, error) {
		row := packContext(in, context)
		if err := t.m.Forward(t.opt.Param, in, in, 0); err != nil { // targets unused
			return nil, err
		}
		if err := t.m.Logits(logits); err != nil {
			return nil, err
		}
		out := make([]float64, v)
		for i, x := range logits[row*v : (row+1)*v] {
			out[i] = float64(x)
		}
		return out, nil
	}
}

// activationScaling names how the fused forward scales the FP8 inputs that
// LayerNorm and GELU write (-act-history), for the run's first line.
func (o options) activationScaling() string {
	if o.actHistory > 0 {
		return fmt.Sprintf("activations delayed (history %d)", o.actHistory)
	}
	return "activations current"
}

// setModelState gives the GPU model the state its rank saved with the
// checkpoint resumed: the delayed activation scaling's (-act-history),
// which a resumed run needs to repeat the uninterrupted one. A checkpoint
// without it (saved with -act-history 0, or at another number of ranks)
// is refused under -act-history, and one with it under -act-history 0.
func setModelState(o options, m *gpumodel.Model, state []byte) error {
	switch {
	case o.actHistory > 0 && state == nil:
		return fmt.Errorf("-act-history %d: the checkpoint holds no activation histories for this rank (saved with -act-history 0, before it became the default, or on another number of ranks), so the resumed run would not repeat the uninterrupted one: resume it with -act-history 0", o.actHistory)
	case o.actHistory == 0 && state != nil:
		return fmt.Errorf("the checkpoint holds activation histories (saved with -act-history, the GPU default): resume with the same -act-history")
	case state == nil:
		return nil
	}
	return m.SetDelayedActivationState(state)
}
