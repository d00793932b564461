package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/examples/gpt/gpumodel"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
)

// corpus is the training and validation tokens.
type corpus struct{ train, valid []uint16 }

func readCorpus(dir string, vocab int) (corpus, error) {
	var c corpus
	for _, f := range []struct {
		name string
		dst  *[]uint16
	}{{data.TrainFile, &c.train}, {data.ValidFile, &c.valid}} {
		v, toks, err := data.ReadTokens(filepath.Join(dir, f.name))
		if err != nil {
			return c, fmt.Errorf("%w (run go run ./examples/gpt/prepare -out %s)", err, dir)
		}
		if v != vocab {
			return c, fmt.Errorf("%s: vocabulary %d, the model's is %d", f.name, v, vocab)
		}
		*f.dst = toks
	}
	return c, nil
}

// config is the optimizer configuration of the run.
func (o options) config() optimizer.Config {
	return optimizer.Config{
		LR:          optimizer.WarmupCosine{Peak: o.lr, Min: o.minLR, Warmup: o.warmup, Total: o.steps},
		WeightDecay: o.wd, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8,
		MaxGradNorm: o.clip, Recipe: o.recipe,
		FirstMomentType: o.moment1, SecondMomentType: o.moment2, MomentBlock: o.momentBlock,
		Logger: o.logger(),
	}
}

// logger is the optimizer's logger: debug output on stderr with -v, else
// nil (silent).
func (o options) logger() *slog.Logger {
	if !o.verbose {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// train runs every rank and returns rank 0's losses of the steps it ran
// (the mean over ranks of each step's training loss).
func train(o options, out io.Writer) ([]float64, error) {
	c, err := readCorpus(o.data, o.shape.Vocab)
	if err != nil {
		return nil, err
	}
	loader := data.Loader{Tokens: c.train, Seq: o.shape.Seq, Batch: o.batch, World: o.ranks, MicroBatches: o.micro, Seed: o.seed}
	if err := loader.Validate(); err != nil {
		return nil, err
	}
	if data.ValidWindows(c.valid, o.shape.Seq) < o.evalWindows {
		return nil, fmt.Errorf("the validation split holds fewer than %d sequences of %d", o.evalWindows, o.shape.Seq)
	}
	fmt.Fprintf(out, "gpt: %d layers, hidden %d, %d heads, FFN %d, context %d: %d parameters; %d ranks x %d micro-batches x %d sequences; %d training tokens; head %v\n",
		o.shape.Layers, o.shape.Hidden, o.shape.Heads, o.shape.FFN, o.shape.Seq, o.shape.NumParams(), o.ranks, o.micro, o.batch, len(c.train), o.head)
	comms := inproc.Communicators(o.ranks)
	if o.grads != nil {
		for r, c := range comms {
			w, err := fp8grad.New(c, *o.grads)
			if err != nil {
				return nil, err
			}
			comms[r] = w
		}
		fmt.Fprintf(out, "gradients reduce-scattered in %v, blocks of %d, error feedback %t\n", o.grads.Format, o.grads.Block, o.grads.ErrorFeedback)
	}
	losses := make([][]float64, o.ranks)
	errs := make([]error, o.ranks)
	var wg sync.WaitGroup
	for r := range o.ranks {
		w := io.Discard
		if r == 0 {
			w = out
		}
		wg.Go(func() { losses[r], errs[r] = rank(o, comms[r], loader, c.valid, w) })
	}
	wg.Wait()
	return losses[0], errors.Join(errs...)
}

// rank trains one rank; out receives its report (rank 0's only).
func rank(o options, comm collective.Communicator, loader data.Loader, valid []uint16, out io.Writer) ([]float64, error) {
	ctx := context.Background()
	params := o.shape.Params()
	opt, err := optimizer.New(ctx, comm, cpu.New(1), params, o.shape.Init(), o.config())
	if err != nil {
		return nil, err
	}
	defer opt.Close()
	if err := resume(ctx, o, out, opt, comm, nil); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "optimizer memory per rank: %.1f MiB\n", float64(opt.Report().Total())/(1<<20))
	m := &model.CPU{Config: o.shape, W: map[string][]float64{}, HeadBF16: o.head == gpumodel.HeadBF16}
	r := comm.Rank()
	rec := &recorder{flopsPerToken: o.shape.FlopsPerToken()}
	rec.config(o, o.evalWindows)
	if r == 0 {
		rec.path = o.curvePath
	}
	var losses []float64
	for step := opt.StepCount(); step < o.steps; step++ {
		start := time.Now()
		sctx, cancel := context.WithTimeout(ctx, o.timeout)
		loss, res, err := trainStep(sctx, opt, comm, m, loader, step, r, o.micro)
		cancel()
		if err == nil {
			err = skipped(res)
		}
		if err != nil {
			return losses, fmt.Errorf("step %d: %w", step+1, err)
		}
		losses = append(losses, loss)
		dt := time.Since(start).Seconds()
		tokens := float64(loader.Global() * loader.Seq)
		rec.step(step+1, loss, dt, tokens)
		fmt.Fprintf(out, "step %5d/%d  loss %.4f  lr %.2e  grad norm %.3f  %6.0f tokens/s  %.2f GFLOP/s  %.2fs\n",
			step+1, o.steps, loss, o.config().LR.LR(step+1), res.GradNorm, tokens/dt, tokens*o.shape.FlopsPerToken()/dt/1e9, dt)
		last := step+1 == o.steps || step+1 == o.stopAfter
		if (o.evalEvery > 0 && (step+1)%o.evalEvery == 0) || last {
			if err := evaluate(ctx, opt, m, valid, o, step+1, rec, out); err != nil {
				return losses, err
			}
		}
		if o.ckpt != "" && ((o.ckptEvery > 0 && (step+1)%o.ckptEvery == 0) || last) {
			if err := saveCheckpoint(ctx, out, opt, comm, o.ckpt, nil); err != nil {
				return losses, err
			}
		}
		if last {
			break
		}
	}
	if err := rec.write(); err != nil {
		return losses, err
	}
	if o.sampleLen > 0 && r == 0 {
		if err := opt.WaitGathers(ctx); err != nil {
			return losses, err
		}
		if err := readWeights(ctx, opt, m, false); err != nil {
			return losses, err
		}
		text, err := sample(m, []byte(o.prompt), o.sampleLen, o.seed)
		if err != nil {
			return losses, err
		}
		fmt.Fprintf(out, "sample:\n%s\n", printable(text))
	}
	return losses, nil
}

// evaluate prints and records the validation loss after step.
func evaluate(ctx context.Context, opt *optimizer.Optimizer, m *model.CPU, valid []uint16, o options, step int, rec *recorder, out io.Writer) error {
	if err := opt.WaitGathers(ctx); err != nil {
		return err
	}
	if err := readWeights(ctx, opt, m, false); err != nil {
		return err
	}
	v, err := validLoss(m, valid, o.evalWindows, o.evalSpread)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "step %5d  validation loss %.4f (%.3f bits per byte)\n", step, v, v/math.Ln2)
	return rec.valid(step, v)
}

// readWeights copies what the optimizer gathered into m, as float64: the
// FP8 weights dequantized, the high-precision ones as gathered. With wait
// it first waits for each parameter's all-gather (the overlap).
func readWeights(ctx context.Context, opt *optimizer.Optimizer, m *model.CPU, wait bool) error {
	for _, p := range m.Params() {
		if wait {
			if err := opt.WaitParam(ctx, p.Name); err != nil {
				return err
			}
		}
		w, err := opt.Weights(p.Name)
		if err != nil {
			return err
		}
		dst := m.W[p.Name]
		if len(dst) != len(w) {
			dst = make([]float64, len(w))
			m.W[p.Name] = dst
		}
		for i, v := range w {
			dst[i] = float64(v)
		}
	}
	return nil
}

// trainStep runs step (0-based) on this rank: micro forward and backward
// passes on the gathered weights, their gradients averaged on the host and
// handed over last parameter first, then StepAsync. It returns the
// training loss averaged over micro-batches and ranks.
func trainStep(ctx context.Context, opt *optimizer.Optimizer, comm collective.Communicator, m *model.CPU,
	loader data.Loader, step, r, micro int) (float64, optimizer.StepResult, error) {
	if err := readWeights(ctx, opt, m, true); err != nil {
		return 0, optimizer.StepResult{}, err
	}
	n := loader.Batch * loader.Seq
	inputs, targets := make([]int32, n), make([]int32, n)
	var sum map[string][]float64
	loss := 0.0
	for k := range micro {
		loader.MicroBatch(inputs, targets, step, r, k)
		a, err := m.Forward(inputs, targets, loader.Batch, loader.Seq)
		if err != nil {
			return 0, optimizer.StepResult{}, err
		}
		loss += a.Loss / float64(micro)
		g := m.Backward(a)
		if sum == nil {
			sum = g
			continue
		}
		for name, v := range g {
			for i, x := range v {
				sum[name][i] += x
			}
		}
	}
	params := m.Params()
	for i := len(params) - 1; i >= 0; i-- {
		name := params[i].Name
		g := make([]float32, len(sum[name]))
		for j, x := range sum[name] {
			g[j] = float32(x / float64(micro))
		}
		if err := opt.SetGrad(name, g); err != nil {
			return 0, optimizer.StepResult{}, err
		}
		if err := opt.GradReady(name); err != nil {
			return 0, optimizer.StepResult{}, err
		}
	}
	res, err := opt.StepAsync(ctx)
	if err != nil {
		return 0, res, err
	}
	loss, err = opt.MeanOverRanks(ctx, loss)
	return loss, res, err
}

// validLoss is the mean loss over windows validation sequences, those of
// data.EvalWindows.
func validLoss(m *model.CPU, valid []uint16, windows int, spread bool) (float64, error) {
	ks, err := data.EvalWindows(windows, data.ValidWindows(valid, m.Seq), spread)
	if err != nil {
		return 0, err
	}
	in, tg := make([]int32, m.Seq), make([]int32, m.Seq)
	total := 0.0
	for _, k := range ks {
		data.Window(in, tg, valid, m.Seq, k)
		a, err := m.Forward(in, tg, 1, m.Seq)
		if err != nil {
			return 0, err
		}
		total += a.Loss
	}
	return total / float64(windows), nil
}

// resume loads the latest checkpoint under -ckpt when -resume asks for it
// (both training paths), and hands the rank's own state saved with it
// (checkpoint.Info.RankState) to setState; a nil setState (the CPU path)
// takes none.
func resume(ctx context.Context, o options, out io.Writer, opt *optimizer.Optimizer, comm collective.Communicator, setState func([]byte) error) error {
	if !o.resume {
		return nil
	}
	info, err := checkpoint.Load(ctx, opt, comm, o.ckpt, checkpoint.LoadOptions{})
	if errors.Is(err, checkpoint.ErrMomentType) {
		return fmt.Errorf("%w; resume with the -moments the checkpoint was written with (the default is fp8,bf16 since 2026-12-05, fp32 before)", err)
	}
	if err != nil {
		return err
	}
	if setState != nil {
		if err := setState(info.RankState); err != nil {
			return fmt.Errorf("resuming from %s: %w", info.Dir, err)
		}
	}
	fmt.Fprintf(out, "resumed from %s (step %d, saved on %d ranks)\n", info.Dir, info.Step, info.World)
	return nil
}

// saveCheckpoint waits for the parameter gathers in flight and saves the
// optimizer's state under dir, with the rank's own state (nil: none; the
// GPU model's delayed activation scaling) (both training paths).
func saveCheckpoint(ctx context.Context, out io.Writer, opt *optimizer.Optimizer, comm collective.Communicator, dir string, state []byte) error {
	if err := opt.WaitGathers(ctx); err != nil {
		return err
	}
	info, err := checkpoint.Save(ctx, opt, comm, dir, checkpoint.SaveOptions{RankState: state})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "saved %s\n", info.Dir)
	return nil
}

// skipped turns a step the optimizer skipped (non-finite gradients) into
// an error. The example has no loss scaler that would make a skipped step
// part of training, and going on would part the loop's step count (which
// picks the batches, the printed learning rate and the curve's steps) from
// the optimizer's (which sets the learning rate applied and is saved in
// checkpoints), so a resumed run would no longer repeat this one. The
// checkpoints saved so far are intact.
func skipped(res optimizer.StepResult) error {
	if !res.Skipped {
		return nil
	}
	return fmt.Errorf("the optimizer skipped the step (%s); stopping: no loss scaler, and the last checkpoint is intact", res.Reason)
}
