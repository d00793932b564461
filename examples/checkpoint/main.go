// Command checkpoint trains a small two-layer network with distopt on d in-process ranks,
// saves a sharded checkpoint half-way, resumes it on a different number of
// ranks, and checks that the continued run ends bit for bit where an
// uninterrupted run ends: FP32 masters, Adam moments and the FP8 weights.
// It finishes by exporting the weights as one safetensors file and
// starting a fresh optimizer from it.
//
// The forward pass reads only the FP8 weights the optimizer gathered. To
// make runs at different world sizes comparable bit for bit, every rank
// computes the gradient of the same global batch (averaging identical
// gradients is exact); in real training each rank takes its own slice and
// runs at different sizes agree up to the rounding of the average.
//
//	go run ./examples/checkpoint -save-ranks 4 -load-ranks 3
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
	"github.com/distopt/distopt/shard"
)

// The model: y = W2 tanh(W1 x) + b, trained to imitate a fixed teacher.
const (
	in, hidden, out = 16, 48, 4
	batchSize       = 32
)

var params = []optimizer.Param{
	{Name: "w1", Shape: []int{hidden, in}},
	{Name: "w2", Shape: []int{out, hidden}},
	{Name: "b", Shape: []int{out}, HighPrecision: true, NoDecay: true},
}

type weights map[string][]float32

func randomWeights(seed uint64) weights {
	r := rand.New(rand.NewPCG(seed, 1))
	w := weights{}
	for _, p := range params {
		n := 1
		for _, s := range p.Shape {
			n *= s
		}
		w[p.Name] = make([]float32, n)
		if !p.HighPrecision {
			for i := range w[p.Name] {
				w[p.Name][i] = float32(r.NormFloat64() / math.Sqrt(float64(p.Shape[1])))
			}
		}
	}
	return w
}

var teacher = randomWeights(42)

func config() optimizer.Config {
	return optimizer.Config{
		LR:          optimizer.WarmupCosine{Peak: 3e-2, Min: 3e-3, Warmup: 5, Total: 40},
		WeightDecay: 0.01,
		MaxGradNorm: 1,
		Recipe:      fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 8},
	}
}

// matVec sets dst = m v for the row-major len(dst) x len(v) matrix m.
func matVec(dst, m, v []float32) {
	for i := range dst {
		var s float32
		for j, x := range v {
			s += m[i*len(v)+j] * x
		}
		dst[i] = s
	}
}

// gradients returns the mean squared error of w on the batch of step and
// its gradient.
func gradients(w weights, step int) (float64, weights) {
	r := rand.New(rand.NewPCG(uint64(step), 9))
	g := weights{}
	for _, p := range params {
		g[p.Name] = make([]float32, len(w[p.Name]))
	}
	x, a, h := make([]float32, in), make([]float32, hidden), make([]float32, hidden)
	y, want, th := make([]float32, out), make([]float32, out), make([]float32, hidden)
	dh := make([]float32, hidden)
	loss := 0.0
	for range batchSize {
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		matVec(th, teacher["w1"], x)
		for i := range th {
			th[i] = float32(math.Tanh(float64(th[i])))
		}
		matVec(want, teacher["w2"], th)
		matVec(a, w["w1"], x)
		for i := range a {
			h[i] = float32(math.Tanh(float64(a[i])))
		}
		matVec(y, w["w2"], h)
		clear(dh)
		for i := range y {
			e := y[i] + w["b"][i] - want[i]
			loss += float64(e * e)
			d := 2 * e / batchSize
			g["b"][i] += d
			for j := range h {
				g["w2"][i*hidden+j] += d * h[j]
				dh[j] += d * w["w2"][i*hidden+j]
			}
		}
		for j := range dh {
			d := dh[j] * (1 - h[j]*h[j])
			for k := range x {
				g["w1"][j*in+k] += d * x[k]
			}
		}
	}
	return loss / batchSize, g
}

// result is a run's final state, assembled from every rank.
type result struct {
	master, m, v map[string][]float32
	fp8          map[string][]byte // FP8 bytes and scale_inv, as rank 0 holds them
	losses       []float64
}

// run trains on d ranks from step from to step to. With load set it first
// loads the checkpoint under dir; with save set it saves there at the end.
func run(d, from, to int, dir string, load, save bool) (*result, error) {
	comms := inproc.Communicators(d)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	res := &result{master: weights{}, m: weights{}, v: weights{}, fp8: map[string][]byte{}}
	for _, p := range params {
		n := len(teacher[p.Name])
		res.master[p.Name], res.m[p.Name], res.v[p.Name] = make([]float32, n), make([]float32, n), make([]float32, n)
	}
	var mu sync.Mutex
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r, comm := range comms {
		wg.Go(func() { errs[r] = rank(comm, from, to, dir, load, save, res, &mu) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return res, nil
}

func rank(comm collective.Communicator, from, to int, dir string, load, save bool, res *result, mu *sync.Mutex) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	init := randomWeights(1)
	if load {
		init = randomWeights(2) // replaced by the load
	}
	o, err := optimizer.New(ctx, comm, cpu.New(1), params, optimizer.FromMap(init), config())
	if err != nil {
		return err
	}
	defer o.Close()
	if load {
		info, err := checkpoint.Load(ctx, o, comm, dir, checkpoint.LoadOptions{})
		if err != nil {
			return err
		}
		if comm.Rank() == 0 {
			fmt.Printf("  loaded %s (step %d, saved by %d ranks) on %d ranks\n", filepath.Base(info.Dir), info.Step, info.World, comm.Size())
		}
	}
	for step := from; step < to; step++ {
		w := weights{}
		for _, p := range params {
			if w[p.Name], err = o.Weights(p.Name); err != nil { // what the model sees: FP8, dequantized
				return err
			}
		}
		loss, g := gradients(w, step)
		for _, p := range params {
			if err := o.SetGrad(p.Name, g[p.Name]); err != nil {
				return err
			}
		}
		if _, err := o.Step(ctx); err != nil {
			return err
		}
		if comm.Rank() == 0 {
			res.losses = append(res.losses, loss)
		}
	}
	if save {
		info, err := checkpoint.Save(ctx, o, comm, dir, checkpoint.SaveOptions{})
		if err != nil {
			return err
		}
		if comm.Rank() == 0 {
			fmt.Printf("  saved %s from %d ranks\n", info.Dir, info.World)
		}
	}
	pieces, err := o.ReadPieces()
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	for _, pc := range pieces {
		copy(res.master[pc.Param][pc.Offset:], pc.Master)
		copy(res.m[pc.Param][pc.Offset:], pc.M)
		copy(res.v[pc.Param][pc.Offset:], pc.V)
	}
	if comm.Rank() == 0 {
		for _, p := range params {
			if p.HighPrecision {
				continue
			}
			t, err := o.Tensor(p.Name)
			if err != nil {
				return err
			}
			b := t.Data
			for _, s := range t.ScaleInv {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(s))
			}
			res.fp8[p.Name] = b
		}
	}
	return nil
}

func sameFloats(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// differences lists what differs between two final states.
func differences(a, b *result) []string {
	var out []string
	for _, p := range params {
		for _, c := range []struct {
			what string
			x, y []float32
		}{{"master", a.master[p.Name], b.master[p.Name]}, {"m", a.m[p.Name], b.m[p.Name]}, {"v", a.v[p.Name], b.v[p.Name]}} {
			if !sameFloats(c.x, c.y) {
				out = append(out, c.what+" of "+p.Name)
			}
		}
		if !bytes.Equal(a.fp8[p.Name], b.fp8[p.Name]) {
			out = append(out, "FP8 bytes or scales of "+p.Name)
		}
	}
	return out
}

func main() {
	saveRanks := flag.Int("save-ranks", 4, "ranks of the run that saves")
	loadRanks := flag.Int("load-ranks", 3, "ranks of the run that resumes")
	steps := flag.Int("steps", 30, "steps in all")
	saveAt := flag.Int("save-at", 15, "step at which to save")
	dir := flag.String("dir", "", "checkpoint root (default: a temporary directory, removed at exit)")
	helpToStdout(flag.CommandLine, os.Args[1:])
	flag.Parse()
	if err := checkFlags(*saveRanks, *loadRanks, *steps, *saveAt); err != nil {
		fmt.Fprintln(os.Stderr, "checkpoint:", err)
		os.Exit(2)
	}
	root := *dir
	if root == "" {
		tmp, err := os.MkdirTemp("", "distopt-checkpoint")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer os.RemoveAll(tmp)
		root = tmp
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "checkpoint:", err)
		os.RemoveAll(root)
		os.Exit(1)
	}

	fmt.Printf("uninterrupted: %d steps on %d ranks\n", *steps, *saveRanks)
	whole, err := run(*saveRanks, 0, *steps, "", false, false)
	if err != nil {
		fail(err)
	}
	fmt.Printf("interrupted: %d steps on %d ranks, then %d on %d ranks\n", *saveAt, *saveRanks, *steps-*saveAt, *loadRanks)
	if _, err := run(*saveRanks, 0, *saveAt, root, false, true); err != nil {
		fail(err)
	}
	resumed, err := run(*loadRanks, *saveAt, *steps, root, true, false)
	if err != nil {
		fail(err)
	}
	fmt.Printf("loss: step 1 %.5f, step %d %.5f (uninterrupted), %.5f (resumed)\n",
		whole.losses[0], *steps, whole.losses[len(whole.losses)-1], resumed.losses[len(resumed.losses)-1])
	if d := differences(whole, resumed); len(d) > 0 {
		fmt.Printf("the resumed run DIFFERS from the uninterrupted one: %v\n", d)
		os.RemoveAll(root)
		os.Exit(1)
	}
	fmt.Println("the resumed run matches the uninterrupted one bit for bit: FP32 masters, Adam moments, FP8 weights and scales")
	if err := exportAndImport(root, *loadRanks, resumed); err != nil {
		fail(err)
	}
}

// checkFlags refuses flag values the example cannot use, with one line
// naming the flag.
func checkFlags(saveRanks, loadRanks, steps, saveAt int) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"save-ranks", saveRanks}, {"load-ranks", loadRanks}} {
		if f.v < 1 || f.v > shard.MaxWorld {
			return fmt.Errorf("-%s=%d: want 1 to %d", f.name, f.v, shard.MaxWorld)
		}
	}
	if steps < 1 {
		return fmt.Errorf("-steps=%d: want at least 1", steps)
	}
	if saveAt < 0 || saveAt >= steps {
		return fmt.Errorf("-save-at=%d: want 0 to -steps-1 (%d)", saveAt, steps-1)
	}
	return nil
}

// exportAndImport exports the final masters (through optimizers started
// from them) as one safetensors file, and reads them back with the
// importer that optimizer.New takes as its InitFunc.
func exportAndImport(root string, d int, want *result) error {
	path := filepath.Join(root, "model.safetensors")
	comms := inproc.Communicators(d)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r, comm := range comms {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o, err := optimizer.New(ctx, comm, cpu.New(1), params, optimizer.FromMap(want.master), config())
			if err == nil {
				err = checkpoint.Export(ctx, o, comm, path)
				o.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	im, err := checkpoint.OpenImport(path, params)
	if err != nil {
		return err
	}
	defer im.Close()
	for _, p := range params {
		got := make([]float32, len(want.master[p.Name]))
		im.Init(p.Name, 0, got)
		if !sameFloats(got, want.master[p.Name]) {
			return fmt.Errorf("imported %s differs from the exported masters", p.Name)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Printf("exported the FP32 weights to one safetensors file (%d bytes) and imported them back unchanged\n", st.Size())
	return im.Err()
}

// helpToStdout sends the usage that -h or -help asks for to stdout: it is
// the output asked for, not an error (flag writes it to stderr).
func helpToStdout(fs *flag.FlagSet, args []string) {
	if slices.ContainsFunc(args, func(a string) bool { a = strings.TrimLeft(a, "-"); return a == "h" || a == "help" }) {
		fs.SetOutput(os.Stdout)
	}
}
