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
// deadline). -overlap takes the steps through the overlapped pipeline
// (GradReady, StepAsync, WaitParam), with the same results bit for bit.
//
// -state-digest makes every rank print, at the end, a SHA-256 of its shard
// of the optimizer state (masters and moments, bit for bit) and of the
// gathered weights: runs of the same d (in-process, one host, several
// hosts) must print the same lines.
//
// -backend gpu (under the launcher only) runs each rank on GPU LOCAL_RANK
// with the CUDA backend and NCCL; the CUDA backend matches the CPU one bit
// for bit, so the digests are those of a CPU run (scripts/gpu/twonode.sh).
//
// -grad-fp8 e4m3 (or e5m2) reduce-scatters the gradients in FP8 with
// per-block scales and FP32 accumulation (collective/fp8grad).
//
// -group-size G shards the optimizer state within groups of G ranks and
// replicates it across the groups (collective/hier: gradients
// reduce-scattered in the group and all-reduced across groups). Any
// divisor of the number of ranks works in-process and, with the CPU
// backend, under the launcher (`distopt run --group-size G` sets it for
// every rank; the groups are gRPC sub-communicators); with -backend gpu 1
// (every rank a group: the two-node GPU check "2 groups x 1") or
// WORLD_SIZE (flat). The printed loss is then averaged within the group
// only.
//
// Over several hosts (distopt run --nnodes 2 --node-rank K, see the
// launcher), an error that names a lost rank also names the node it ran on.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/hier"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
	"github.com/distopt/distopt/shard"
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

// stateDigest is the -state-digest flag (see the command's doc).
var (
	stateDigest = flag.Bool("state-digest", false, "print every rank's SHA-256 of its optimizer state and of the gathered weights at the end")
	groupSize   = flag.Int("group-size", 0, "hierarchical sharding (collective/hier): shard within groups of this many ranks, replicate across them (0: flat, or under the launcher DISTOPT_GROUP_SIZE); with -backend gpu 1 or WORLD_SIZE")
	gradFP8     = flag.String("grad-fp8", "", "e4m3 or e5m2: reduce-scatter the gradients in FP8 with FP32 accumulation (collective/fp8grad; CPU backend, flat sharding); empty: as the gradient type")
	backendName = flag.String("backend", "cpu", "cpu, or gpu (under the launcher: GPU LOCAL_RANK, CUDA backend and NCCL)")
)

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
	verbose := flag.Bool("v", false, "debug output: the optimizer's log (log/slog) on stderr")
	recipeName := flag.String("recipe", "current", "FP8 recipe: "+strings.Join(fp8.RecipeNames(), ", ")+" (any case; Transformer Engine's names too; :E5M2 for E5M2)")
	lr := flag.Float64("lr", 3e-3, "learning rate")
	moments := flag.String("moments", "fp32", "moment types: fp32, bf16 or fp8 for both, or M,V (e.g. fp8,bf16)")
	momentBlock := flag.Int("moment-block", 128, "block of FP8 moments in elements (32, 64, 128)")
	var dl runOptions
	flag.DurationVar(&dl.setup, "setup-timeout", 2*time.Minute, "deadline of the rendezvous and of the set-up of the communicator and optimizer")
	flag.DurationVar(&dl.step, "step-timeout", time.Minute, "deadline of each training step, and of the final barrier")
	flag.DurationVar(&dl.delay, "step-delay", 0, "pause added to every step (a slower model)")
	flag.BoolVar(&dl.overlap, "overlap", false, "overlapped pipeline: declare each gradient ready in the backward pass, step with the gathers in flight, wait for each parameter in the forward pass")
	helpToStdout(flag.CommandLine, os.Args[1:])
	flag.Parse()
	if err := checkFlags(*ranks, *steps, *bs, *backendName, os.Getenv("RANK") != ""); err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(2)
	}
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
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
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
		var rc rendezvous.Config
		fp8Loss, rep, rc, err = processRank(os.Stdout, *steps, *bs, teacher, init, cfg, dl)
		if err == nil && rc.Rank != 0 {
			return
		}
		// The world as the rendezvous read it: WORLD_SIZE, or Slurm's or
		// Open MPI's count when only RANK was set.
		d = rc.WorldSize
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

// checkFlags refuses flag values a run cannot use, with one line naming
// the flag: counts below 1, more in-process ranks than a layout takes
// (shard.MaxWorld), an unknown backend, and -backend gpu outside the
// launcher (launched false), which would otherwise train on the CPU.
func checkFlags(ranks, steps, batch int, backend string, launched bool) error {
	switch {
	case steps < 1:
		return fmt.Errorf("-steps=%d: want at least 1", steps)
	case batch < 1:
		return fmt.Errorf("-batch=%d: want at least 1 example per rank", batch)
	case !launched && (ranks < 1 || ranks > shard.MaxWorld):
		return fmt.Errorf("-ranks=%d: want 1 to %d", ranks, shard.MaxWorld)
	case backend != "cpu" && backend != "gpu":
		return fmt.Errorf("-backend=%q: want cpu or gpu", backend)
	case backend == "gpu" && !launched:
		return fmt.Errorf("-backend gpu runs one process per GPU: start it with distopt run (in-process ranks run on the CPU)")
	}
	return nil
}

// trainSharded runs the distributed optimizer on d in-process ranks; it
// returns the mean loss of every step and each rank's memory report. Rank
// 0 prints its progress to out.
func trainSharded(out io.Writer, d, steps, bs int, teacher, init weights, cfg optimizer.Config, dl runOptions) ([]float64, []optimizer.MemoryReport, error) {
	comms, err := inprocWorld(d)
	if err != nil {
		return nil, nil, err
	}
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

// globalRank is the rank of comm in the whole job: its rank, or for a
// hierarchical communicator its rank among every group's ranks.
func globalRank(comm collective.Communicator) int {
	if h, ok := comm.(*hier.Comm); ok {
		return h.GlobalRank()
	}
	return comm.Rank()
}

// inprocWorld returns d in-process communicators: one flat world, or with
// -group-size G a hierarchical world of groups of G.
func inprocWorld(d int) ([]collective.Communicator, error) {
	if *groupSize <= 0 {
		comms := inproc.Communicators(d)
		for r, c := range comms {
			var err error
			if comms[r], err = fp8Grads(c); err != nil {
				return nil, err
			}
		}
		return comms, nil
	}
	hc, err := hier.InProcess(d, *groupSize)
	if err != nil {
		return nil, err
	}
	comms := make([]collective.Communicator, d)
	for i, c := range hc {
		comms[i] = c
	}
	return comms, nil
}

// fp8Grads applies -grad-fp8 to comm.
func fp8Grads(comm collective.Communicator) (collective.Communicator, error) {
	var f fp8.Format
	switch strings.ToLower(*gradFP8) {
	case "":
		return comm, nil
	case "e4m3":
		f = fp8.E4M3
	case "e5m2":
		f = fp8.E5M2
	default:
		return nil, fmt.Errorf("-grad-fp8=%q: want e4m3 or e5m2", *gradFP8)
	}
	return fp8grad.New(comm, fp8grad.Config{Format: f})
}

// grouped applies -group-size (or DISTOPT_GROUP_SIZE, which `distopt run
// --group-size` sets) to the communicator flat of a launched rank: 0 or
// WORLD_SIZE keeps it flat; 1 makes every rank a group of its own (the
// state replicated, the gradients all-reduced: collective/hier with a
// one-rank group); other sizes make the groups and cross-groups as gRPC
// sub-communicators of the job (CPU backend only: nccl.NewSub, the NCCL
// equivalent, has not run on GPUs yet). The caller closes the result.
func grouped(ctx context.Context, store *rendezvous.Store, flat collective.Communicator) (collective.Communicator, error) {
	g := *groupSize
	if g == 0 {
		var err error
		if g, err = hier.GroupSizeFromEnv(flat.Size()); err != nil {
			return nil, err
		}
	}
	switch {
	case g == 0 || g == flat.Size():
		return flat, nil
	case g == 1:
		return hier.New(single.New(flat.Memory(), nil), flat)
	case *backendName == "cpu":
		return hier.GRPC(ctx, store, g, grpccomm.Config{})
	}
	return nil, fmt.Errorf("-group-size=%d: with -backend gpu, 1 or WORLD_SIZE (%d)", g, flat.Size())
}

// runOptions are the deadlines that bound the operations of a run (see the
// command's doc) and the way steps are taken.
type runOptions struct {
	setup, step time.Duration
	delay       time.Duration // added to every step
	overlap     bool          // GradReady, StepAsync and WaitParam instead of Step
}

// rank trains one rank; every rank returns the loss of each step averaged
// over all ranks, and rank 0 prints the progress to out, starting with a
// banner that names the communicator (via) and the backend.
func rank(out io.Writer, via string, comm collective.Communicator, steps, bs int, teacher, init weights, cfg optimizer.Config, dl runOptions) ([]float64, optimizer.MemoryReport, error) {
	return rankOn(out, via, comm, cpu.New(1), steps, bs, teacher, init, cfg, dl)
}

// rankOn is rank on backend be, whose memory is that of comm.
func rankOn(out io.Writer, via string, comm collective.Communicator, be backend.Backend, steps, bs int, teacher, init weights, cfg optimizer.Config, dl runOptions) ([]float64, optimizer.MemoryReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dl.setup)
	defer cancel()
	r := comm.Rank()
	o, err := optimizer.New(ctx, comm, be, params, optimizer.FromMap(init), cfg)
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
	if *stateDigest {
		// With -overlap the last step's all-gathers are still in flight.
		if err := o.WaitGathers(context.Background()); err != nil {
			return nil, optimizer.MemoryReport{}, err
		}
		state, weights, err := digests(o)
		if err != nil {
			return nil, optimizer.MemoryReport{}, err
		}
		fmt.Fprintf(out, "state digest of rank %d of %d: shard %s weights %s\n", r, comm.Size(), state, weights)
	}
	return losses, o.Report(), nil
}

// digests returns the SHA-256 (hex, first 16 bytes) of this rank's shard of
// the optimizer state (every piece's name, offset, master and moments, bit
// for bit) and of the gathered weights of every parameter.
func digests(o *optimizer.Optimizer) (state, gathered string, err error) {
	pieces, err := o.ReadPieces()
	if err != nil {
		return "", "", err
	}
	hs, hw := sha256.New(), sha256.New()
	put := func(h io.Writer, xs []float32) {
		for _, x := range xs {
			_ = binary.Write(h, binary.LittleEndian, math.Float32bits(x))
		}
	}
	for _, p := range pieces {
		fmt.Fprintf(hs, "%s@%d:", p.Param, p.Offset)
		put(hs, p.Master)
		put(hs, p.M)
		put(hs, p.V)
	}
	for _, p := range params {
		w, err := o.Weights(p.Name)
		if err != nil {
			return "", "", err
		}
		fmt.Fprintf(hw, "%s:", p.Name)
		put(hw, w)
	}
	return hex.EncodeToString(hs.Sum(nil)[:16]), hex.EncodeToString(hw.Sum(nil)[:16]), nil
}

// step runs training step s of this rank under a deadline of its own
// (dl.step) and returns the loss averaged over all ranks.
func step(o *optimizer.Optimizer, comm collective.Communicator, s, bs int, teacher weights, dl runOptions) (float64, optimizer.StepResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dl.step)
	defer cancel()
	// The forward pass sees only what the optimizer gathered: FP8 weights
	// dequantized with scale_inv, and the high-precision biases.
	// With -overlap it waits for each parameter's gather just before
	// reading it, and declares each gradient ready as the backward pass
	// (last layer first) produces it, which starts its bucket's
	// reduce-scatter.
	w := weights{}
	for _, p := range params {
		var err error
		if dl.overlap {
			err = o.WaitParam(ctx, p.Name)
		}
		if err == nil {
			w[p.Name], err = o.Weights(p.Name)
		}
		if err != nil {
			return 0, optimizer.StepResult{}, err
		}
	}
	x, y := batch(teacher, s, globalRank(comm), bs)
	loss, g := lossAndGrad(w, x, y, bs)
	time.Sleep(dl.delay)
	for i := len(params) - 1; i >= 0; i-- {
		name := params[i].Name
		err := o.SetGrad(name, g[name])
		if err == nil && dl.overlap {
			err = o.GradReady(name)
		}
		if err != nil {
			return 0, optimizer.StepResult{}, err
		}
	}
	stepFn := o.Step
	if dl.overlap {
		stepFn = o.StepAsync
	}
	res, err := stepFn(ctx)
	if err != nil {
		return 0, res, err
	}
	loss, err = o.MeanOverRanks(ctx, loss)
	return loss, res, err
}

// processRank trains one rank of a job started by `distopt run`: the
// rendezvous comes from the environment, the ranks talk over gRPC. It
// returns the rendezvous configuration it read: the caller takes the
// world size from it, which Slurm's or Open MPI's variables may give.
func processRank(out io.Writer, steps, bs int, teacher, init weights, cfg optimizer.Config, dl runOptions) ([]float64, optimizer.MemoryReport, rendezvous.Config, error) {
	rc, err := rendezvous.FromEnv()
	if err != nil {
		return nil, optimizer.MemoryReport{}, rc, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dl.setup) // the set-up alone
	defer cancel()
	store, err := rendezvous.Connect(ctx, rc)
	if err != nil {
		return nil, optimizer.MemoryReport{}, rc, err
	}
	defer store.Close()
	flat, be, transport, err := connect(ctx, store, rc)
	if err != nil {
		return nil, optimizer.MemoryReport{}, rc, err
	}
	defer be.Close()
	defer flat.Close()
	comm, err := grouped(ctx, store, flat)
	if err != nil {
		return nil, optimizer.MemoryReport{}, rc, err
	}
	via := fmt.Sprintf("%s (one process per rank, rendezvous at %s)", transport, net.JoinHostPort(rc.MasterAddr, strconv.Itoa(rc.MasterPort)))
	if h, ok := comm.(*hier.Comm); ok {
		defer comm.Close()
		via += fmt.Sprintf(", hierarchical: %d groups of %d ranks", h.Cross().Size(), h.Size())
	}
	if comm, err = fp8Grads(comm); err != nil {
		return nil, optimizer.MemoryReport{}, rc, err
	}
	cfg.Store = store // ranks compare their configuration's fingerprint here first
	losses, rep, err := rankOn(out, via, comm, be, steps, bs, teacher, init, cfg, dl)
	if err == nil {
		bctx, cancel := context.WithTimeout(context.Background(), dl.step)
		defer cancel()
		err = collective.Barrier(bctx, flat) // every rank of the job, not only the group
	}
	return losses, rep, rc, withNode(err, rc)
}

// connect makes this rank's backend and communicator: the CPU backend and
// gRPC, or (-backend gpu) the CUDA backend on GPU LOCAL_RANK and NCCL
// ordered after the backend's stream. transport names the communicator.
func connect(ctx context.Context, store *rendezvous.Store, rc rendezvous.Config) (collective.Communicator, backend.Backend, string, error) {
	switch *backendName {
	case "cpu":
		comm, err := grpccomm.New(ctx, store, grpccomm.Config{})
		if err != nil {
			return nil, nil, "", err
		}
		return comm, cpu.New(1), "gRPC communicator over TCP", nil
	case "gpu":
		gb, err := gpu.New(rc.LocalRank)
		if err != nil {
			return nil, nil, "", err
		}
		comm, err := nccl.New(ctx, nccl.Config{Store: store, Device: gb.Device(), Compute: gb.Stream()})
		if err != nil {
			return nil, nil, "", errors.Join(err, gb.Close())
		}
		return comm, gb, fmt.Sprintf("NCCL communicator on GPU %d", rc.LocalRank), nil
	}
	return nil, nil, "", fmt.Errorf("-backend=%q: want cpu or gpu", *backendName)
}

// withNode adds to err, when it names a rank (collective.RankError) of a
// job of several hosts, the node that rank ran on: rank / LOCAL_WORLD_SIZE,
// as the launcher numbers them.
func withNode(err error, rc rendezvous.Config) error {
	var re *collective.RankError
	if rc.WorldSize == rc.LocalWorldSize || !errors.As(err, &re) {
		return err
	}
	return fmt.Errorf("%w (rank %d ran on node %d)", err, re.Rank, re.Rank/rc.LocalWorldSize)
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

// helpToStdout sends the usage that -h or -help asks for to stdout: it is
// the output asked for, not an error (flag writes it to stderr).
func helpToStdout(fs *flag.FlagSet, args []string) {
	if slices.ContainsFunc(args, func(a string) bool { a = strings.TrimLeft(a, "-"); return a == "h" || a == "help" }) {
		fs.SetOutput(os.Stdout)
	}
}
