// Command train trains a small MLP with distopt on d in-process ranks. The
// forward pass of every rank reads only the FP8 weights the optimizer
// gathered (dequantized with their scale_inv); gradients go into the
// optimizer's gradient views. The same model is also trained in plain FP32
// without sharding, and the final losses are printed side by side with the
// per-rank memory report.
//
//	go run ./examples/train -ranks 4 -steps 200
//
// Under the launcher each rank is a process and the ranks talk over gRPC:
//
//	go build -o bin/ ./cmd/distopt ./examples/train
//	bin/distopt run --nproc-per-node 4 -- bin/train
//
// Deadlines bound each operation, never the whole run: -setup-timeout the
// rendezvous and the set-up of the communicator and optimizer, and
// -step-timeout each training step (forward, backward, optimizer step and
// loss all-reduce) and the final barrier. A run of any length finishes as
// long as each step does. -step-delay adds a pause to every step, as a
// slower model would (tests use it to make a run much longer than every
// deadline).
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// The model: y = W2 relu(W1 x + b1) + b2, trained to imitate a fixed teacher.
const (
	in, hidden, out = 32, 64, 8
)

var params = []optimizer.Param{
	{Name: "w1", Shape: []int{hidden, in}},
	{Name: "b1", Shape: []int{hidden}, HighPrecision: true, NoDecay: true},
	{Name: "w2", Shape: []int{out, hidden}},
	{Name: "b2", Shape: []int{out}, HighPrecision: true, NoDecay: true},
}

type weights map[string][]float32

// teacherWeights returns the teacher the model imitates: random matrices,
// biases of 0.1.
func teacherWeights() weights {
	teacher := initWeights(99)
	for _, p := range params {
		if p.HighPrecision {
			for i := range teacher[p.Name] {
				teacher[p.Name][i] = 0.1
			}
		}
	}
	return teacher
}

func initWeights(seed uint64) weights {
	r := rand.New(rand.NewPCG(seed, 1))
	w := weights{}
	for _, p := range params {
		n := 1
		for _, s := range p.Shape {
			n *= s
		}
		v := make([]float32, n)
		if !p.HighPrecision {
			std := 1 / math.Sqrt(float64(p.Shape[1]))
			for i := range v {
				v[i] = float32(r.NormFloat64() * std)
			}
		}
		w[p.Name] = v
	}
	return w
}

// batch returns inputs and teacher targets for a step and a rank.
func batch(teacher weights, step, rank, size int) (x, y []float32) {
	r := rand.New(rand.NewPCG(uint64(step), uint64(rank)))
	x = make([]float32, size*in)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y, _ = forward(teacher, x, size)
	return x, y
}

// forward returns the outputs and the hidden activations.
func forward(w weights, x []float32, n int) (y, h []float32) {
	h = make([]float32, n*hidden)
	y = make([]float32, n*out)
	for b := range n {
		for j := range hidden {
			s := w["b1"][j]
			for k := range in {
				s += w["w1"][j*in+k] * x[b*in+k]
			}
			h[b*hidden+j] = max(s, 0)
		}
		for j := range out {
			s := w["b2"][j]
			for k := range hidden {
				s += w["w2"][j*hidden+k] * h[b*hidden+k]
			}
			y[b*out+j] = s
		}
	}
	return y, h
}

// lossAndGrad returns the mean squared error and its gradients.
func lossAndGrad(w weights, x, target []float32, n int) (float64, weights) {
	y, h := forward(w, x, n)
	g := weights{"w1": make([]float32, hidden*in), "b1": make([]float32, hidden), "w2": make([]float32, out*hidden), "b2": make([]float32, out)}
	loss := 0.0
	dh := make([]float32, hidden)
	for b := range n {
		clear(dh)
		for j := range out {
			d := y[b*out+j] - target[b*out+j]
			loss += float64(d * d)
			dy := 2 * d / float32(n*out)
			g["b2"][j] += dy
			for k := range hidden {
				g["w2"][j*hidden+k] += dy * h[b*hidden+k]
				dh[k] += dy * w["w2"][j*hidden+k]
			}
		}
		for j := range hidden {
			if h[b*hidden+j] <= 0 {
				continue
			}
			g["b1"][j] += dh[j]
			for k := range in {
				g["w1"][j*in+k] += dh[j] * x[b*in+k]
			}
		}
	}
	return loss / float64(n*out), g
}

func main() {
	ranks := flag.Int("ranks", 4, "data-parallel ranks (in-process)")
	steps := flag.Int("steps", 200, "optimizer steps")
	bs := flag.Int("batch", 16, "examples per rank per step")
	recipeName := flag.String("recipe", "current", "FP8 recipe: "+strings.Join(fp8.RecipeNames(), ", ")+" (any case; Transformer Engine's names too; :E5M2 for E5M2)")
	lr := flag.Float64("lr", 3e-3, "learning rate")
	moments := flag.String("moments", "fp32", "moment types: fp32, bf16 or fp8 for both, or M,V (e.g. fp8,bf16)")
	momentBlock := flag.Int("moment-block", 128, "block of FP8 moments in elements (32, 64, 128)")
	var dl deadlines
	flag.DurationVar(&dl.setup, "setup-timeout", 2*time.Minute, "deadline of the rendezvous and of the set-up of the communicator and optimizer")
	flag.DurationVar(&dl.step, "step-timeout", time.Minute, "deadline of each training step, and of the final barrier")
	flag.DurationVar(&dl.delay, "step-delay", 0, "pause added to every step (a slower model)")
	flag.Parse()
	recipe, err := fp8.ParseRecipe(*recipeName)
	if err != nil {
		fmt.Fprintln(os.Stderr, "train: -recipe:", err)
		os.Exit(2)
	}
	if recipe.Scaling == fp8.TensorDelayed {
		recipe.HistoryLen = 16 // a short run: a history that forgets big early amaxes
	}
	teacher, init := teacherWeights(), initWeights(1)
	cfg := optimizer.Config{LR: optimizer.WarmupCosine{Peak: *lr, Min: *lr / 10, Warmup: *steps / 10, Total: *steps}, WeightDecay: 0.01, MaxGradNorm: 1, Recipe: recipe}
	if err := setMoments(&cfg, *moments, *momentBlock); err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(2)
	}

	d := *ranks
	var fp8Loss []float64
	var reports []optimizer.MemoryReport
	if os.Getenv("RANK") != "" {
		// One process per rank under `distopt run`.
		var rep optimizer.MemoryReport
		var r int
		fp8Loss, rep, r, err = processRank(os.Stdout, *steps, *bs, teacher, init, cfg, dl)
		if err == nil && r != 0 {
			return
		}
		d, _ = strconv.Atoi(os.Getenv("WORLD_SIZE"))
		reports = []optimizer.MemoryReport{rep}
	} else {
		fp8Loss, reports, err = trainSharded(os.Stdout, d, *steps, *bs, teacher, init, cfg, dl)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(1)
	}
	refLoss := trainFP32(d, *steps, *bs, teacher, init, cfg)
	fmt.Printf("\nfinal loss: distopt (%s, %d ranks) %.5f   plain FP32 unsharded %.5f   initial %.5f\n", recipe, d, fp8Loss[len(fp8Loss)-1], refLoss, fp8Loss[0])
	for r, rep := range reports {
		if r > 0 && rep.String() == reports[0].String() {
			fmt.Printf("rank %d memory: same as rank 0\n", r)
			continue
		}
		fmt.Printf("\nrank %d memory:\n%s", r, rep)
	}
}

// trainSharded runs the distributed optimizer on d in-process ranks; it
// returns the mean loss of every step and each rank's memory report. Rank
// 0 prints its progress to out.
func trainSharded(out io.Writer, d, steps, bs int, teacher, init weights, cfg optimizer.Config, dl deadlines) ([]float64, []optimizer.MemoryReport, error) {
	comms := inproc.Communicators(d)
	losses := make([][]float64, d)
	reports := make([]optimizer.MemoryReport, d)
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r := range d {
		wg.Add(1)
		go func() {
			defer wg.Done()
			losses[r], reports[r], errs[r] = rank(out, "in-process communicator (goroutines of this process)", comms[r], steps, bs, teacher, init, cfg, dl)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return losses[0], reports, nil
}

// deadlines bound the operations of a run (see the command's doc).
type deadlines struct {
	setup, step time.Duration
	delay       time.Duration // added to every step
}

// rank trains one rank; every rank returns the loss of each step averaged
// over all ranks, and rank 0 prints the progress to out, starting with a
// banner that names the communicator (via) and the backend.
func rank(out io.Writer, via string, comm collective.Communicator, steps, bs int, teacher, init weights, cfg optimizer.Config, dl deadlines) ([]float64, optimizer.MemoryReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dl.setup)
	defer cancel()
	r := comm.Rank()
	o, err := optimizer.New(ctx, comm, optimizer.NewCPU(1), params, optimizer.FromMap(init), cfg)
	if err != nil {
		return nil, optimizer.MemoryReport{}, err
	}
	defer o.Close()
	if r == 0 {
		fmt.Fprintf(out, "distopt: %d ranks, %s, backend %s, recipe %s\n", comm.Size(), via, o.Backend().Name(), cfg.Recipe)
	}
	var losses []float64
	for s := range steps {
		loss, res, err := step(o, comm, s, bs, teacher, dl)
		if err != nil {
			return nil, optimizer.MemoryReport{}, fmt.Errorf("step %d: %w", s, err)
		}
		if res.Skipped && r == 0 {
			fmt.Fprintf(out, "step %d skipped: %s\n", s, res.Reason)
		}
		losses = append(losses, loss)
		if r == 0 && (s%max(1, steps/20) == 0 || s == steps-1) {
			fmt.Fprintf(out, "step %4d  loss %.5f  grad norm %.4f  lr %.2e\n", s, losses[s], res.GradNorm, cfg.LR.LR(res.Step))
		}
	}
	return losses, o.Report(), nil
}

// step runs training step s of this rank under a deadline of its own
// (dl.step) and returns the loss averaged over all ranks.
func step(o *optimizer.Optimizer, comm collective.Communicator, s, bs int, teacher weights, dl deadlines) (float64, optimizer.StepResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dl.step)
	defer cancel()
	// The forward pass sees only what the optimizer gathered: FP8 weights
	// dequantized with scale_inv, and the high-precision biases.
	w := weights{}
	for _, p := range params {
		var err error
		if w[p.Name], err = o.Weights(p.Name); err != nil {
			return 0, optimizer.StepResult{}, err
		}
	}
	x, y := batch(teacher, s, comm.Rank(), bs)
	loss, g := lossAndGrad(w, x, y, bs)
	time.Sleep(dl.delay)
	for name, gv := range g {
		if err := o.SetGrad(name, gv); err != nil {
			return 0, optimizer.StepResult{}, err
		}
	}
	res, err := o.Step(ctx)
	if err != nil {
		return 0, res, err
	}
	lossBuf := make(collective.HostBuffer, 8)
	binary.LittleEndian.PutUint64(lossBuf, math.Float64bits(loss))
	if err := collective.AllReduce(ctx, comm, lossBuf, lossBuf, collective.Float64, collective.Avg); err != nil {
		return 0, res, err
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(lossBuf)), res, nil
}

// processRank trains one rank of a job started by `distopt run`: the
// rendezvous comes from the environment, the ranks talk over gRPC.
func processRank(out io.Writer, steps, bs int, teacher, init weights, cfg optimizer.Config, dl deadlines) ([]float64, optimizer.MemoryReport, int, error) {
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return nil, optimizer.MemoryReport{}, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dl.setup) // the set-up alone
	defer cancel()
	store, err := rendezvous.Connect(ctx, rc)
	if err != nil {
		return nil, optimizer.MemoryReport{}, 0, err
	}
	defer store.Close()
	comm, err := grpccomm.New(ctx, store, grpccomm.Config{})
	if err != nil {
		return nil, optimizer.MemoryReport{}, 0, err
	}
	defer comm.Close()
	cfg.Store = store // ranks compare their configuration's fingerprint here first
	via := fmt.Sprintf("gRPC communicator over TCP (one process per rank, rendezvous at %s)", net.JoinHostPort(rc.MasterAddr, strconv.Itoa(rc.MasterPort)))
	losses, rep, err := rank(out, via, comm, steps, bs, teacher, init, cfg, dl)
	if err == nil {
		bctx, cancel := context.WithTimeout(context.Background(), dl.step)
		defer cancel()
		err = collective.Barrier(bctx, comm)
	}
	return losses, rep, rc.Rank, err
}

// trainFP32 trains the same model in float64-accumulated FP32 AdamW on one
// rank with the union of all ranks' batches, and returns the final loss.
func trainFP32(d, steps, bs int, teacher, init weights, cfg optimizer.Config) float64 {
	w := weights{}
	m, v := weights{}, weights{}
	for k, x := range init {
		w[k] = append([]float32(nil), x...)
		m[k], v[k] = make([]float32, len(x)), make([]float32, len(x))
	}
	var loss float64
	for s := range steps {
		grads := weights{}
		loss = 0
		for r := range d {
			x, y := batch(teacher, s, r, bs)
			l, g := lossAndGrad(w, x, y, bs)
			loss += l / float64(d)
			for k, gv := range g {
				if grads[k] == nil {
					grads[k] = make([]float32, len(gv))
				}
				for i := range gv {
					grads[k][i] += gv[i] / float32(d)
				}
			}
		}
		norm := 0.0
		for _, g := range grads {
			for _, x := range g {
				norm += float64(x) * float64(x)
			}
		}
		clip := min(1, cfg.MaxGradNorm/(math.Sqrt(norm)+1e-6))
		t := float64(s + 1)
		lr := cfg.LR.LR(s + 1)
		for _, p := range params {
			wd := cfg.WeightDecay
			if p.NoDecay {
				wd = 0
			}
			for i := range w[p.Name] {
				g := float64(grads[p.Name][i]) * clip
				mm := 0.9*float64(m[p.Name][i]) + 0.1*g
				vv := 0.999*float64(v[p.Name][i]) + 0.001*g*g
				m[p.Name][i], v[p.Name][i] = float32(mm), float32(vv)
				pw := float64(w[p.Name][i]) * (1 - lr*wd)
				pw -= lr * (mm / (1 - math.Pow(0.9, t))) / (math.Sqrt(vv/(1-math.Pow(0.999, t))) + 1e-8)
				w[p.Name][i] = float32(pw)
			}
		}
	}
	return loss
}
