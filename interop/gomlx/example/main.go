// Command example trains a GoMLX model (an MLP, or with -model transformer a
// one-block transformer learning to reverse sequences; pure-Go simplego
// backend) with distopt
// on d data-parallel ranks: GoMLX computes the loss and the gradients, distopt
// averages them, updates its FP32 master shard with AdamW and gathers FP8
// weights, which go back into the GoMLX variables for the next step. GoMLX's
// own Adam trains the same model on the same batches (the ranks' batches
// stacked), and the losses are printed side by side.
//
// On a GPU (-backend gpu, -model lm) XLA computes the byte-level language
// model through JAX's PJRT CUDA plugin and distopt's CUDA backend steps
// (interop/gomlx's GPUTrainer); -optimizer adam trains the same model with
// GoMLX's own Adam instead, for the comparison of loss, speed and memory:
//
//	go run ./examples/gpt/prepare -out data/gpt   # in the core module
//	go build -o bin/ ./example
//	bin/example -backend gpu -model lm -data ../../data/gpt -steps 1000 -batch 16
//	bin/example -backend gpu -model lm -data ../../data/gpt -steps 1000 -batch 16 -optimizer adam
//
// On several GPUs each process is a rank with its own GPU, NCCL and XLA
// client (not run yet; scripts/gomlx_gpu.sh d2):
//
//	bin/distopt run --nproc-per-node 2 -- bin/example -backend gpu -model lm -data ../../data/gpt
//
//	go run ./example -ranks 4 -steps 200
//
// Under the launcher each rank is a process and the ranks talk over gRPC:
//
//	go build -o bin/ ./example && (cd ../.. && go build -o interop/gomlx/bin/ ./cmd/distopt)
//	bin/distopt run --nproc-per-node 4 -- bin/example
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/fp8"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/distopt/distopt/optimizer"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

const seed = 7

type options struct {
	steps, batch     int
	lr, eps          float64
	recipe           fp8.Recipe
	moment1, moment2 optimizer.MomentDType
	dotGrad          bool // -dot-grad: gomlxinterop.UseDotGeneralGradient
	task             toy.Task
	store            optimizer.Agreer // under the launcher: where ranks compare configurations first
	report           io.Writer        // where rank 0 prints
}

// optimizerConfig is distopt's configuration of o: AdamW without weight
// decay (GoMLX's Adam), a constant learning rate.
func (o options) optimizerConfig() optimizer.Config {
	return optimizer.Config{LR: optimizer.Constant(o.lr), Eps: o.eps, Recipe: o.recipe, Store: o.store,
		FirstMomentType: o.moment1, SecondMomentType: o.moment2}
}

func main() {
	ranks := flag.Int("ranks", 4, "data-parallel ranks (in-process; under `distopt run` WORLD_SIZE)")
	steps := flag.Int("steps", 200, "optimizer steps")
	batch := flag.Int("batch", 16, "examples per rank per step")
	lr := flag.Float64("lr", 3e-3, "learning rate (both optimizers)")
	recipeName := flag.String("recipe", "current", "FP8 recipe: current, delayed, block, tile, mx")
	moments := flag.String("moments", "fp32", "distopt's Adam moments: fp32, bf16 or fp8 for both, or M,V (e.g. fp8,bf16: 3 bytes per parameter instead of 8)")
	model := flag.String("model", "mlp", "model: mlp (32-64-64-8, regression), transformer (one block, reverses 8 tokens) or lm (byte-level language model on -data)")
	g := gpuOptions{}
	backend := flag.String("backend", "cpu", "cpu (simplego, in-process ranks, GoMLX Adam alongside) or gpu (XLA through the PJRT CUDA plugin; distopt's CUDA backend)")
	g.flags()
	dataDir := flag.String("data", "data/gpt", "-model lm: directory of train.tok and valid.tok (examples/gpt/prepare)")
	lmLayers := flag.Int("layers", 12, "-model lm: transformer blocks")
	lmDim := flag.Int("dim", 768, "-model lm: width")
	lmHeads := flag.Int("heads", 12, "-model lm: attention heads")
	lmSeq := flag.Int("seq", 256, "-model lm: context length in bytes")
	dotGrad := flag.Bool("dot-grad", true, "differentiate GoMLX's matrix products with matrix products (gomlxinterop.UseDotGeneralGradient); false: GoMLX v0.26's own broadcast-and-reduce gradient, about ten times slower on a GPU")
	flag.Parse()
	if *dotGrad {
		gomlxinterop.UseDotGeneralGradient()
	}
	recipe, ok := map[string]fp8.Recipe{
		"current": {Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
		"delayed": {Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 16},
		"block":   {Format: fp8.E4M3, Scaling: fp8.Block1x128},
		"tile":    {Format: fp8.E4M3, Scaling: fp8.Block128x128},
		"mx":      {Format: fp8.E4M3, Scaling: fp8.MXFP8},
	}[*recipeName]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown recipe %q\n", *recipeName)
		os.Exit(2)
	}
	var task toy.Task
	var err error
	switch *model {
	case "mlp":
		task = toy.NewData(toy.Small, 11)
	case "transformer":
		task = toy.Tiny
	case "lm":
		g.task, err = toy.LoadLM(*dataDir, *lmSeq, *lmDim, *lmHeads, *lmLayers)
		task = g.task
	default:
		err = fmt.Errorf("unknown model %q", *model)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(2)
	}
	o := options{steps: *steps, batch: *batch, lr: *lr, eps: 1e-7, recipe: recipe, task: task, report: os.Stdout, dotGrad: *dotGrad}
	if o.moment1, o.moment2, err = optimizer.ParseMomentTypes(*moments, optimizer.RuleAdamW); err != nil {
		fmt.Fprintf(os.Stderr, "-moments: %v\n", err)
		os.Exit(2)
	}
	g.options = o
	switch {
	case *backend == "gpu" && g.task == nil:
		err = fmt.Errorf("-backend gpu trains -model lm")
	case *backend != "gpu" && (g.keepDecoded || g.copyGrads || g.allocator != ""):
		err = fmt.Errorf("-keep-decoded, -copy-grads and -xla-allocator are options of -backend gpu")
	case *backend == "gpu":
		err = runGPU(g)
	case *backend != "cpu":
		err = fmt.Errorf("unknown backend %q", *backend)
	case os.Getenv("RANK") != "":
		err = processRank(o)
	default:
		err = inProcess(*ranks, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// runTimeout bounds a run, so that a rank whose peers are gone fails.
const runTimeout = 10 * time.Minute

// inProcess runs d ranks as goroutines over the in-process communicator.
func inProcess(d int, o options) error {
	ref, err := reference(d, o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	comms := inproc.Communicators(d)
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r := range d {
		wg.Go(func() {
			var rf *adamRun
			if r == 0 {
				rf = ref
			}
			errs[r] = rank(ctx, comms[r], o, rf)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// processRank runs one rank of a job started by `distopt run`: the
// rendezvous comes from the environment, the ranks talk over gRPC.
func processRank(o options) error {
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	join, cancelJoin := context.WithTimeout(ctx, time.Minute)
	defer cancelJoin()
	store, err := rendezvous.Connect(join, rc)
	if err != nil {
		return err
	}
	defer store.Close()
	return grpcRank(ctx, store, o)
}

// grpcRank runs the rank of the job of store over gRPC; rank 0 trains
// GoMLX's Adam first and prints.
func grpcRank(ctx context.Context, store *rendezvous.Store, o options) error {
	if err := agreeOnFlags(ctx, store, o); err != nil {
		return err
	}
	comm, err := grpccomm.New(ctx, store, grpccomm.Config{})
	if err != nil {
		return err
	}
	defer comm.Close()
	o.store = store
	var ref *adamRun
	if comm.Rank() == 0 {
		if ref, err = reference(comm.Size(), o); err != nil {
			return err
		}
	}
	if err := rank(ctx, comm, o, ref); err != nil {
		return err
	}
	return collective.Barrier(ctx, comm)
}

// agreeOnFlags fails unless every rank of the job was started with the
// same training flags: ranks that took different numbers of steps would
// wait for each other's collectives until the deadline.
func agreeOnFlags(ctx context.Context, store optimizer.Agreer, o options) error {
	flags := fmt.Sprintf("-steps %d -batch %d -lr %g -recipe %v -moments %v,%v -dot-grad %v, model %T", o.steps, o.batch, o.lr, o.recipe, o.moment1, o.moment2, o.dotGrad, o.task)
	if err := store.CheckAgreement(ctx, "gomlx-example/flags", flags); err != nil {
		return fmt.Errorf("the ranks were started with different flags (start them with the same): %w", err)
	}
	return nil
}

// adamRun is GoMLX's own Adam on the same data: the loss of every step and
// the held-out loss at the end.
type adamRun struct {
	losses  []float32
	heldOut float32
}

// heldOut is a batch no step trains on.
func heldOut(task toy.Task) (x, y *tensors.Tensor) { return toy.Concat(task, 1<<20, 8, 64) }

func reference(d int, o options) (*adamRun, error) {
	be, err := toy.Backend()
	if err != nil {
		return nil, err
	}
	losses, ctx, err := toy.Adam(be, o.task, seed, o.steps, d, o.batch, o.lr, o.eps)
	if err != nil {
		return nil, err
	}
	x, y := heldOut(o.task)
	h, err := toy.Eval(be, o.task, ctx, x, y)
	return &adamRun{losses: losses, heldOut: h}, err
}

// rank trains one rank; rank 0 (which gets ref) prints the losses to o.report.
func rank(ctx context.Context, comm collective.Communicator, o options, ref *adamRun) error {
	be, err := toy.Backend()
	if err != nil {
		return err
	}
	batch := func(s int) gomlxinterop.Batch {
		x, y := o.task.Batch(s, comm.Rank(), o.batch)
		return gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
	}
	cfg := gomlxinterop.Config{Optimizer: o.optimizerConfig()}
	tr, err := gomlxinterop.NewTrainer(ctx, comm, be, toy.Context(seed), o.task.Model(), o.task.Loss, batch(0), cfg)
	if err != nil {
		return err
	}
	defer tr.Close()
	if ref != nil {
		fmt.Fprintf(o.report, "distopt + GoMLX (%s): %d ranks, recipe %s, %d parameters, variables shared with the backend: %t\n",
			be.Name(), comm.Size(), o.recipe, len(tr.Params()), tr.Shared())
		for _, p := range tr.Params() {
			fmt.Fprintf(o.report, "  %-52s distopt shape %-8s layout %-10v high precision %t\n", p.Name, fmt.Sprint(p.Shape), p.Layout, p.HighPrecision)
		}
		fmt.Fprintf(o.report, "%6s  %14s  %14s\n", "step", "distopt FP8", "GoMLX Adam")
	}
	lossBuf := make(buffer.HostBuffer, 8)
	for s := range o.steps {
		loss, res, err := tr.Step(ctx, batch(s))
		if err != nil {
			return err
		}
		if res.Skipped {
			return fmt.Errorf("step %d skipped: %s", s, res.Reason)
		}
		binary.LittleEndian.PutUint64(lossBuf, math.Float64bits(float64(loss)))
		if err := collective.AllReduce(ctx, comm, lossBuf, lossBuf, buffer.Float64, collective.Avg); err != nil {
			return err
		}
		if ref != nil && (s%max(1, o.steps/10) == 0 || s == o.steps-1) {
			fmt.Fprintf(o.report, "%6d  %14.5f  %14.5f\n", s, math.Float64frombits(binary.LittleEndian.Uint64(lossBuf)), ref.losses[s])
		}
	}
	if ref == nil {
		return nil
	}
	x, y := heldOut(o.task)
	h, err := toy.Eval(be, o.task, tr.GradExec().Context(), x, y)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.report, "held-out loss after %d steps: distopt %.5f   GoMLX Adam %.5f   (%+.2f%%)\n", o.steps, h, ref.heldOut, 100*(h/ref.heldOut-1))
	return nil
}

// gpuOptions configures -backend gpu.
type gpuOptions struct {
	options
	plugin, optimizer, out string
	allocator              string
	task                   *toy.LM
	warmup, evalEvery      int
	evalBatches            int
	tf32, keepDecoded      bool
	copyGrads              bool
}

// flags defines the -backend gpu flags of g.
func (g *gpuOptions) flags() {
	flag.StringVar(&g.plugin, "plugin", "", "PJRT CUDA plugin (default $"+gomlxinterop.PluginEnv+", then "+gomlxinterop.DefaultCUDAPlugin+")")
	flag.StringVar(&g.optimizer, "optimizer", "distopt", "-backend gpu: distopt or adam (GoMLX's own, for comparison; run each in its own process)")
	flag.BoolVar(&g.tf32, "tf32", false, "-backend gpu: float32 matrix products in TF32 on tensor cores")
	flag.StringVar(&g.allocator, "xla-allocator", "", "-backend gpu: XLA's device allocator: bfc (the plugin's default: a pool that keeps what it took), platform (memory allocated and freed per buffer, so the driver's figure is what the graphs hold; slower), cuda_async or default")
	flag.BoolVar(&g.keepDecoded, "keep-decoded", false, "-backend gpu: let XLA keep the decoded FP8 weights from forward to backward (gomlxinterop.GPUConfig.KeepDecoded; the model in float32), to measure what the default saves")
	flag.BoolVar(&g.copyGrads, "copy-grads", false, "-backend gpu: copy the gradients into distopt's own buffers (gomlxinterop.GPUConfig.CopyGradients) instead of the step reading XLA's bucket outputs in place, to measure what the default saves")
	flag.StringVar(&g.out, "out", "", "-backend gpu: write the loss curve to this CSV file")
	flag.IntVar(&g.warmup, "warmup", 10, "-backend gpu: steps not timed (compilation)")
	flag.IntVar(&g.evalEvery, "eval-every", 100, "-backend gpu: steps between validation losses")
	flag.IntVar(&g.evalBatches, "eval-batches", 8, "-backend gpu: validation batches per evaluation")
}
