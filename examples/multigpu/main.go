// Command multigpu steps distopt on a GPT-like parameter set (about 1.4
// billion parameters by default: plan.GPT13B, the GPT-3 XL shape with
// an untied head) on every GPU of a host, one process per GPU under the
// distopt launcher, with NCCL between them:
//
//	go build -o bin/ ./cmd/distopt ./examples/multigpu
//	bin/distopt run --nproc-per-node 2 -- bin/multigpu -steps 20 -out results
//
// Each rank prints a line per step: the time of each phase (gradient
// reduce-scatter, norm, update, amax all-reduce, cast, all-gather), the
// global gradient norm, and the GPU memory that NVML measures for the
// process next to the library's own prediction (optimizer.PredictMemory)
// plus the CUDA context and NCCL's buffers, measured apart while setting
// up. Rank 0 then prints the summary of all ranks, compares it with the
// PyTorch ZeRO-1 baseline when -baseline names the JSON that
// scripts/bench/torch_zero1.py wrote, and with -out writes summary.json
// and three PNG charts: memory_plan.png (the planner's bytes per rank of
// each configuration users weigh, at this d), memory_measured.png (per
// rank: predicted buffers, other allocations, context, NCCL, from NVML)
// and step_phases.png (median time of each phase), drawn with gonum/plot.
// -replot SUMMARY.json redraws the charts of an earlier run without
// running anything.
//
// The gradients are synthetic, shaped and scaled like a backward pass's
// (see gradModel): a pool of -pool gradient sets per rank is made on the
// host before the run and one is uploaded into the optimizer's gradient
// views before each step (the upload is timed apart, not in the step).
//
// Steps: -warmup steps first (not counted), then -steps with each phase's
// GPU work waited for on every rank (phaseSync: the update phase includes
// one barrier, whose median time is reported; the cast phase holds the
// earlier buckets' all-gathers, which start as each bucket is cast), then
// -plain-steps without those waits, whose wall time is the step time
// reported. Every step starts with a barrier after the gradients' upload.
//
// # With real compute: -compute gemm
//
// -compute gemm replaces the synthetic gradients by the FP8 GEMMs of every
// linear layer (QKV, attention output, MLP up and down of each block, and
// the untied head; gemm.Linear, -tokens rows per micro-batch,
// -micro-batches per step) and takes the optimizer's overlapped step
// (schedule.go): the forward pass waits for each parameter's bucket
// (WaitParam: the stream waits, not the host) before its GEMM reads the
// gathered FP8 weight in place; the backward pass writes each weight
// gradient with the weight-gradient GEMM straight into the optimizer's
// gradient view (the other gradients, of embeddings, norms and biases,
// with a copy of their size) and declares it ready (GradReady), which
// starts a bucket's reduce-scatter once all its parameters are; then
// StepAsync returns with the all-gathers in flight. Four passes of -steps
// iterations are timed by CUDA events on the stream (measure.go):
// compute (forward and backward alone), comm (the collectives of one
// recorded step replayed alone), step (the step alone) and overlapped
// (training). The optimizer's own work is step - comm, the exposed
// communication overlapped - compute - (step - comm). They are printed per
// iteration and in summary.json, drawn in step_phases.png, and compared
// with scripts/bench/torch_overlap.py's JSON given to -baseline:
//
//	distopt run --nproc-per-node 2 -- multigpu -compute gemm -tokens 16384 -steps 10 -out results -baseline torch_overlap.json
//
// Without a GPU: -backend cpu runs the same program on the CPU backend, under
// the launcher (gRPC between the processes) or, without it, as -ranks
// in-process ranks; a small model suits it:
//
//	go run ./examples/multigpu -backend cpu -ranks 2 -layers 2 -hidden 128 -ffn 512 -vocab 1000 -positions 64 -steps 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/plan"
)

// options are the flags.
type options struct {
	gpt                       plan.GPTConfig
	backend                   string
	ranks                     int
	warmup, steps, plainSteps int
	pool                      int
	first, second             optimizer.MomentDType // -moments
	recipe                    fp8.Recipe
	lr                        float64
	grads                     gradModel
	seed                      uint64
	workers                   int
	out, baseline             string
	replot                    string // summary.json to draw the charts of, without running
	timeout                   time.Duration
	compute                   string // synthetic (gradients uploaded) or gemm (the FP8 GEMMs of every layer, overlapped)
	micro                     int    // micro-batches per step (-compute gemm)
	shardedGrads              bool   // Config.ShardedGradients (ZeRO-2)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{gpt: plan.GPT13B}
	fs := flag.NewFlagSet("multigpu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.gpt.RegisterFlags(fs)
	fs.StringVar(&o.backend, "backend", "gpu", "gpu (NCCL, under the launcher) or cpu")
	fs.IntVar(&o.ranks, "ranks", 2, "in-process ranks when not started by the launcher (CPU backend)")
	fs.IntVar(&o.warmup, "warmup", 2, "steps before the timed ones")
	fs.IntVar(&o.steps, "steps", 20, "timed steps, each phase waited for (-compute gemm: timed iterations of each pass)")
	fs.IntVar(&o.plainSteps, "plain-steps", 10, "timed steps without waits between phases (the step time)")
	fs.IntVar(&o.pool, "pool", 2, "gradient sets made per rank and cycled through")
	moments := fs.String("moments", "fp32", "Adam moments: fp32, bf16 or fp8 (E4M3, a float32 scale per 128) for both, or M,V (e.g. fp8,bf16)")
	recipe := fs.String("recipe", "current", "FP8 recipe of the gathered weights: "+strings.Join(fp8.RecipeNames(), ", ")+" (see fp8.ParseRecipe)")
	fs.Float64Var(&o.lr, "lr", 1e-4, "learning rate (AdamW, weight decay 0.1)")
	fs.Float64Var(&o.grads.Scale, "grad-scale", 1e-3, "gradient scale (see gradModel)")
	fs.Float64Var(&o.grads.Decay, "grad-decay", 0.97, "gradient decay per block going back from the head")
	fs.IntVar(&o.grads.Tokens, "tokens", 16384, "tokens per rank's micro-batch (rows of the token embedding's gradient; with -compute gemm the rows of every GEMM)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic gradients")
	fs.IntVar(&o.workers, "workers", 0, "host goroutines per rank for the gradients and the CPU backend (0: CPUs / ranks on the host)")
	fs.StringVar(&o.out, "out", "", "directory for summary.json and the PNG charts (rank 0; none if empty)")
	fs.StringVar(&o.baseline, "baseline", "", "JSON of scripts/bench/torch_zero1.py to compare with")
	fs.StringVar(&o.replot, "replot", "", "draw the charts of this summary.json into -out (default: its directory) without running")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "deadline of the whole run")
	fs.StringVar(&o.compute, "compute", "synthetic", "synthetic: gradients uploaded before each synchronous step, its phases timed; "+
		"gemm: each iteration runs every linear layer's FP8 GEMMs (forward, data and weight gradient, -tokens rows per micro-batch) "+
		"with the step overlapped, and reports compute, communication and exposed communication (GPU backend)")
	fs.IntVar(&o.micro, "micro-batches", 1, "micro-batches per step, gradients accumulated (-compute gemm)")
	fs.BoolVar(&o.shardedGrads, "sharded-grads", false, "ZeRO-2: no full-size gradient buffer, a pool of bucket-sized buffers reduce-scattered as each bucket is declared ready "+
		"(-compute synthetic only: the upload declares each gradient ready as it writes it, last parameter first, so the reduce-scatters run during the upload "+
		"and the barrier after it; the rs phase and the step time then leave them out: compare memory, not phases, with an unsharded run)")
	helpToStdout(fs, args)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.first, o.second, err = optimizer.ParseMomentTypes(*moments, optimizer.RuleAdamW); err != nil {
		return o, fmt.Errorf("-moments=%q: want fp32, bf16, fp8 or M,V: %w", *moments, err)
	}
	if o.recipe, err = fp8.ParseRecipe(*recipe); err != nil {
		return o, fmt.Errorf("-recipe: %w", err)
	}
	o.grads.GPT, o.grads.DType = o.gpt, buffer.BFloat16
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.backend != "gpu" && o.backend != "cpu":
		return o, fmt.Errorf("-backend=%q: want gpu or cpu", o.backend)
	case o.steps < 1 || o.warmup < 0 || o.plainSteps < 0 || o.pool < 1 || o.ranks < 1:
		return o, errors.New("-steps and -pool and -ranks must be at least 1, -warmup and -plain-steps at least 0")
	case o.gpt.Layers < 0 || o.gpt.Hidden < 1 || o.gpt.FFN < 1 || o.gpt.Vocab < 2 || o.gpt.Positions < 1:
		return o, fmt.Errorf("model %+v: sizes must be positive (vocabulary at least 2)", o.gpt)
	}
	return o, o.validateCompute()
}

// validateCompute checks the flags of -compute.
func (o options) validateCompute() error {
	switch o.compute {
	case "synthetic":
		if o.micro != 1 {
			return fmt.Errorf("-micro-batches=%d: only -compute gemm accumulates micro-batches", o.micro)
		}
		return nil
	case "gemm":
	default:
		return fmt.Errorf("-compute=%q: want synthetic or gemm", o.compute)
	}
	switch {
	case o.backend != "gpu":
		return errors.New("-compute gemm runs the FP8 GEMMs on the GPU: it needs -backend gpu")
	case o.warmup < 1:
		return errors.New("-compute gemm needs -warmup of at least 1 (the warm-up step's collectives are replayed to time them alone)")
	case o.micro < 1:
		return fmt.Errorf("-micro-batches=%d: want at least 1", o.micro)
	case o.shardedGrads:
		return errors.New("-sharded-grads with -compute gemm: the compute-only pass writes every weight gradient before declaring any ready, more than the pool of bucket buffers holds; use it with -compute synthetic")
	case o.grads.Tokens < 16 || o.grads.Tokens%16 != 0:
		return fmt.Errorf("-tokens=%d: the GEMMs need a positive multiple of 16 rows per micro-batch", o.grads.Tokens)
	}
	for _, p := range o.gpt.Params() {
		if isGEMM(p) && (p.Shape[0]%16 != 0 || p.Shape[1]%16 != 0) {
			return fmt.Errorf("-compute gemm: %s is %dx%d: FP8 GEMMs need both sizes multiples of 16 (-hidden, -ffn, -vocab)", p.Name, p.Shape[0], p.Shape[1])
		}
	}
	_, _, err := activationRecipes(o.recipe)
	return err
}

// config is the optimizer configuration of the run.
func (o options) config() optimizer.Config {
	return optimizer.Config{LR: optimizer.Constant(o.lr), WeightDecay: 0.1, Recipe: o.recipe,
		FirstMomentType: o.first, SecondMomentType: o.second, ShardedGradients: o.shardedGrads}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "multigpu: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if _, launched := os.LookupEnv("RANK"); o.replot != "" {
		err = replot(o, stdout)
	} else if launched {
		err = runLaunched(ctx, o, stdout, stderr)
	} else {
		err = runInProcess(ctx, o, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "multigpu: %v\n", err)
		return 1
	}
	return 0
}

// runLaunched runs this process's rank; rank 0 reports for all.
func runLaunched(ctx context.Context, o options, stdout, stderr io.Writer) (err error) {
	workers := o.workers
	localSize := 1
	if s, ok := os.LookupEnv("LOCAL_WORLD_SIZE"); ok {
		fmt.Sscan(s, &localSize)
	}
	if workers < 1 {
		workers = max(1, runtime.NumCPU()/max(1, localSize))
	}
	j, err := launchedJob(ctx, o.backend, workers, stderr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, j.close()) }()
	s, err := runRank(ctx, j, o, workers, stdout)
	if err != nil {
		return err
	}
	all, err := gatherSummaries(ctx, j.store, s)
	if err != nil || j.rank != 0 {
		return err
	}
	return report(o, all, stdout)
}

// runInProcess runs -ranks in-process ranks on the CPU backend.
func runInProcess(ctx context.Context, o options, stdout io.Writer) error {
	if o.backend != "cpu" {
		return errors.New("-backend gpu runs one process per GPU: start it with 'distopt run --nproc-per-node N -- multigpu ...' (or use -backend cpu)")
	}
	workers := o.workers
	if workers < 1 {
		workers = max(1, runtime.NumCPU()/o.ranks)
	}
	jobs := inprocJobs(o.ranks, workers)
	sums := make([]*rankSummary, len(jobs))
	errs := make([]error, len(jobs))
	var mu sync.Mutex // one rank prints at a time
	var wg sync.WaitGroup
	for r, j := range jobs {
		wg.Go(func() {
			w := &lockedWriter{mu: &mu, w: stdout, prefix: fmt.Sprintf("[rank %d] ", r)}
			sums[r], errs[r] = runRank(ctx, j, o, workers, w)
			errs[r] = errors.Join(errs[r], j.close())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return report(o, sums, stdout)
}

// lockedWriter writes whole lines with a prefix, one writer at a time.
type lockedWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := io.WriteString(l.w, l.prefix); err != nil {
		return 0, err
	}
	return l.w.Write(p)
}

// gradSeed derives the seed of one rank's gradient set.
func gradSeed(seed uint64, rank, set int) uint64 {
	return splitMix64(seed ^ splitMix64(uint64(rank)<<32|uint64(set)))
}

// upload writes one gradient set into the optimizer's gradient views. With
// sharded gradients (ready) it goes last parameter first, as a backward
// pass would, and declares each gradient ready once written: the pooled
// buffers are then reduce-scattered as their buckets complete.
func upload(opt *optimizer.Optimizer, names []string, grads [][]byte, ready bool) error {
	for k := range names {
		i := k
		if ready {
			i = len(names) - 1 - k
		}
		v, err := opt.Grad(names[i])
		if err != nil {
			return err
		}
		if err := opt.Backend().Write(v.Data, 0, grads[i]); err != nil {
			return err
		}
		if ready {
			if err := opt.GradReady(names[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// helpToStdout sends the usage that -h or -help asks for to stdout: it is
// the output asked for, not an error (flag writes it to stderr).
func helpToStdout(fs *flag.FlagSet, args []string) {
	if slices.ContainsFunc(args, func(a string) bool { a = strings.TrimLeft(a, "-"); return a == "h" || a == "help" }) {
		fs.SetOutput(os.Stdout)
	}
}
