//go:build cgo && linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/cuda"
	gomlxinterop "github.com/distopt/distopt/interop/gomlx"
	"github.com/distopt/distopt/interop/gomlx/internal/toy"
	"github.com/distopt/distopt/optimizer/gpu"
)

// gpuRun is one training run on the GPU and what it measured.
type gpuRun struct {
	o       gpuOptions
	be      *gpu.Backend
	xb      *xla.Backend
	rank    int    // this process's rank of world
	world   int    // data-parallel ranks (processes, one GPU each)
	peak    uint64 // device memory in use (all processes), the most seen
	base    uint64 // in use before XLA's backend was made
	start   time.Time
	timed   int // steps timed (after the warm-up)
	elapsed time.Duration
}

// runGPU trains task on GPU LOCAL_RANK with distopt (GPUTrainer) or with
// GoMLX's own Adam, and prints losses, speed and memory. Under `distopt
// run --nproc-per-node d` each process is a rank on its own GPU, with its XLA
// client limited to that GPU, and rank r trains on part r of the data.
func runGPU(o gpuOptions) error {
	ctx := context.Background()
	r := &gpuRun{o: o, world: 1}
	var comm collective.Communicator
	if os.Getenv("RANK") != "" {
		rk, err := gpu.SetupFromEnv(ctx, nccl.Config{})
		if err != nil {
			return err
		}
		defer rk.Close()
		r.be, comm = rk.Backend, rk.Comm
		r.o.store, r.rank, r.world = rk.Store, rk.Comm.Rank(), rk.Comm.Size()
		if err := agreeOnFlags(ctx, rk.Store, o.options); err != nil {
			return err
		}
	} else {
		be, err := gpu.New(0)
		if err != nil {
			return err
		}
		defer be.Close()
		r.be = be
		comm = single.New(buffer.Device, func(dst, src buffer.Buffer) error {
			d, s := dst.(buffer.DeviceBuffer), src.(buffer.DeviceBuffer)
			return be.Stream().CopyDtoD(cuda.DevicePtr(d.Ptr), cuda.DevicePtr(s.Ptr), min(d.Size, s.Size))
		})
	}
	r.base = r.used()
	xcfg := gomlxinterop.XLAConfig{PluginPath: o.plugin, TF32: o.tf32, Allocator: o.allocator}
	if r.world > 1 {
		xcfg.Devices = []int{r.be.Ordinal()}
	}
	xb, err := gomlxinterop.NewXLABackend(xcfg)
	if err != nil {
		return err
	}
	defer xb.Finalize()
	r.xb = xb
	fmt.Printf("GPU %s, XLA %s; model: %d layers, width %d, %d heads, context %d, batch %d per rank\n",
		r.be.Name(), xb.Description(), o.task.Layers, o.task.Dim, o.task.Heads, o.task.Len, o.batch)
	switch o.optimizer {
	case "distopt":
		return r.distopt(ctx, comm)
	case "adam":
		if r.world > 1 {
			return errors.New("-optimizer adam trains one process: GoMLX's Adam is not data-parallel here")
		}
		if o.keepDecoded || o.copyGrads {
			return errors.New("-keep-decoded and -copy-grads are options of distopt's graph, not of -optimizer adam")
		}
		return r.adam()
	}
	return fmt.Errorf("unknown optimizer %q (distopt or adam)", o.optimizer)
}

// used returns the device memory in use on the GPU (all processes).
func (r *gpuRun) used() uint64 {
	free, total, err := r.be.Device().MemInfo()
	if err != nil {
		return 0
	}
	return total - free
}

func (r *gpuRun) batch(s int) gomlxinterop.Batch {
	x, y := r.o.task.Batch(s, r.rank, r.o.batch)
	return gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}}
}

// distopt trains with distopt's AdamW (no weight decay: GoMLX's Adam).
func (r *gpuRun) distopt(ctx context.Context, comm collective.Communicator) error {
	cfg := r.o.optimizerConfig()
	t0 := time.Now()
	tr, err := gomlxinterop.NewGPUTrainer(ctx, r.be, comm, r.xb, toy.Context(seed), r.o.task.Model(), r.o.task.Loss, r.batch(0), gomlxinterop.GPUConfig{Optimizer: cfg, KeepDecoded: r.o.keepDecoded, CopyGradients: r.o.copyGrads})
	if err != nil {
		return err
	}
	defer tr.Close()
	rep := tr.Optimizer().Report()
	fmt.Printf("distopt %s: %d parameters, planner %.1f MiB (%.2f bytes/param); trainer made in %v\n", r.o.recipe, rep.Params, float64(rep.Total())/(1<<20), rep.BytesPerParam(), time.Since(t0).Round(time.Millisecond))
	eval := func() (float32, error) { return r.validation(tr.Eval) }
	err = r.loop(func(s int) (float32, error) {
		l, res, err := tr.Step(ctx, r.batch(s))
		if err == nil && res.Skipped {
			err = fmt.Errorf("step %d skipped: %s", s, res.Reason)
		}
		return l, err
	}, eval)
	if err != nil {
		return err
	}
	tm := tr.Timing()
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(tm.Steps) / 1000 }
	grads := "gradients lent in place"
	if !tr.Optimizer().Config().ExternalGradients {
		grads = "gradient copies"
	}
	fmt.Printf("hand-over per step: sync %.3f ms, %s %.3f ms, distopt step+wait %.3f ms (compute %.3f ms); weights: %d PJRT views, %d copied\n",
		per(tm.Sync), grads, per(tm.Copy), per(tm.Update), per(tm.Compute), tm.Views, tm.Copies)
	return nil
}

// adam trains with GoMLX's own Adam (train.Trainer) on the same batches.
func (r *gpuRun) adam() error {
	gctx := toy.Context(seed)
	opt := optimizers.Adam().LearningRate(r.o.lr).Epsilon(r.o.eps).Done()
	tr := train.NewTrainer(r.xb, gctx, r.o.task.Model(), r.o.task.Loss, opt, nil, nil)
	var evalExec *mlctx.Exec
	eval := func(b gomlxinterop.Batch) (float32, error) {
		if evalExec == nil {
			var err error
			evalExec, err = mlctx.NewExec(r.xb, gctx.Reuse(), func(ctx *mlctx.Context, x, y *graph.Node) *graph.Node {
				return graph.ReduceAllMean(r.o.task.Loss([]*graph.Node{y}, r.o.task.Model()(ctx, nil, []*graph.Node{x})))
			})
			if err != nil {
				return 0, err
			}
		}
		out, err := evalExec.Exec(b.Inputs[0], b.Labels[0])
		if err != nil {
			return 0, err
		}
		return tensors.ToScalar[float32](out[0]), nil
	}
	return r.loop(func(s int) (float32, error) {
		b := r.batch(s)
		m, err := tr.TrainStep(nil, b.Inputs, b.Labels)
		if err != nil {
			return 0, err
		}
		return tensors.ToScalar[float32](m[0]), nil
	}, func() (float32, error) { return r.validation(eval) })
}

// validation returns the mean loss over the validation batches.
func (r *gpuRun) validation(eval func(gomlxinterop.Batch) (float32, error)) (float32, error) {
	sum := float32(0)
	for k := range r.o.evalBatches {
		x, y := r.o.task.ValidBatch(k, r.o.batch)
		l, err := eval(gomlxinterop.Batch{Inputs: []*tensors.Tensor{x}, Labels: []*tensors.Tensor{y}})
		if err != nil {
			return 0, err
		}
		sum += l
	}
	return sum / float32(r.o.evalBatches), nil
}

// loop runs the steps, evaluates every evalEvery steps and at the end,
// and prints the losses, the speed after the warm-up steps (evaluations
// not counted) and the peak device memory; with -out it writes the curve
// as CSV (step, training loss, validation loss or empty).
func (r *gpuRun) loop(step func(s int) (float32, error), eval func() (float32, error)) error {
	var csv *os.File
	if r.o.out != "" && r.rank == 0 { // the ranks share the weights; rank 0 writes the curve
		var err error
		if csv, err = os.Create(r.o.out); err != nil {
			return err
		}
		defer csv.Close()
		fmt.Fprintln(csv, "step,loss,val_loss")
	}
	var val float32
	var evalTime time.Duration
	last, lastStep := time.Now(), 0 // the previous evaluation's end, for the ms/step between evaluations
	for s := range r.o.steps {
		if s == r.o.warmup {
			r.start, evalTime = time.Now(), 0
		}
		t0 := time.Now()
		l, err := step(s)
		if err != nil {
			return err
		}
		if s == 0 {
			fmt.Printf("first step (compilation included) %v\n", time.Since(t0).Round(time.Millisecond))
		}
		r.peak = max(r.peak, r.used())
		line := fmt.Sprintf("%d,%g,", s, l)
		if s%r.o.evalEvery == 0 || s == r.o.steps-1 {
			t0 := time.Now()
			per := ""
			if s > lastStep {
				per = fmt.Sprintf("  %.1f ms/step since step %d", float64(t0.Sub(last).Microseconds())/1000/float64(s-lastStep), lastStep)
			}
			if val, err = eval(); err != nil {
				return err
			}
			evalTime += time.Since(t0)
			last, lastStep = time.Now(), s
			line += fmt.Sprint(val)
			fmt.Printf("step %5d  loss %.4f  validation %.4f%s\n", s, l, val, per)
		}
		if csv != nil {
			fmt.Fprintln(csv, line)
		}
	}
	timed := r.o.steps - r.o.warmup
	if timed <= 0 {
		return errors.New("no steps after the warm-up to time")
	}
	el := time.Since(r.start) - evalTime
	fmt.Printf("summary: optimizer %s, %.0f tokens/s over %d ranks (%.2f ms/step over %d steps), peak device memory %.0f MiB (%.0f MiB before XLA), final validation loss %.4f\n",
		r.o.optimizer, float64(r.world*timed*r.o.batch*r.o.task.Len)/el.Seconds(), r.world, el.Seconds()*1000/float64(timed), timed,
		float64(r.peak)/(1<<20), float64(r.base)/(1<<20), val)
	return nil
}
