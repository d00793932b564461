package gpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/single"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/shard"
)

// stepParams has primes, one element, a scalar, a matrix larger than a
// bucket and high-precision parameters.
func stepParams() []optimizer.Param {
	return []optimizer.Param{
		{Name: "w1", Shape: []int{37, 129}},
		{Name: "b1", Shape: []int{129}, HighPrecision: true, NoDecay: true},
		{Name: "one", Shape: []int{1}},
		{Name: "prime", Shape: []int{8191}, Group: 1},
		{Name: "big", Shape: []int{131, 257}, Group: 1},
		{Name: "tiny", Shape: []int{2}, HighPrecision: true, NoDecay: true},
		{Name: "scalar", Shape: []int{}, NoDecay: true},
		{Name: "w2", Shape: []int{3, 5}},
	}
}

func numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

func stepConfigs() map[string]optimizer.Config {
	groups := []optimizer.Group{
		{Name: "main", LR: optimizer.WarmupCosine{Peak: 1e-2, Min: 1e-3, Warmup: 2, Total: 6}, WeightDecay: 0.1},
		{Name: "slow", LR: optimizer.Constant(3e-3), WeightDecay: 0.01},
	}
	base := optimizer.Config{Groups: groups, MaxGradNorm: 4, Layout: shard.Options{BucketElements: 6000}}
	out := map[string]optimizer.Config{}
	for _, rc := range []fp8.Recipe{
		{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
		{Format: fp8.E5M2, Scaling: fp8.TensorCurrent, Margin: 1, PowerOf2: true},
		{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 4},
		{Format: fp8.E4M3, Scaling: fp8.Block1x128},
		{Format: fp8.E4M3, Scaling: fp8.Block128x128},
		{Format: fp8.E4M3, Scaling: fp8.MXFP8},
		{Format: fp8.E5M2, Scaling: fp8.MXFP8},
	} {
		c := base
		c.Recipe = rc
		out[rc.String()] = c
	}
	c := base
	c.MomentType, c.GradType, c.HighPrecisionType = collective.BFloat16, collective.Float32, collective.Float32
	out["bf16 moments, fp32 grads"] = c
	c = base
	c.Rule, c.Momentum = optimizer.RuleSGD, 0.9
	out["sgd"] = c
	return out
}

// stepGrad is the gradient of a parameter at a step, with an outlier
// every third step (clipping) and a NaN at step 4 (a skipped step).
func stepGrad(p optimizer.Param, step int) []float32 {
	r := rand.New(rand.NewPCG(uint64(step), uint64(len(p.Name))))
	g := make([]float32, numel(p.Shape))
	for i := range g {
		g[i] = float32(r.IntN(129)-64) * float32(math.Ldexp(1, -8-r.IntN(6)))
		if step%3 == 2 && i == 0 {
			g[i] *= 256
		}
	}
	if step == 4 && p.Name == "prime" {
		g[7] = float32(math.NaN())
	}
	return g
}

// outcome is what a run leaves: every piece's state, every FP8 tensor and
// high-precision weight, and the step results.
type outcome struct {
	pieces  []optimizer.PieceState
	tensors map[string]*fp8.Tensor
	weights map[string][]float32
	skipped []bool
}

func train(t *testing.T, comm collective.Communicator, be optimizer.Backend, cfg optimizer.Config, steps int) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	params := stepParams()
	init := map[string][]float32{}
	r := rand.New(rand.NewPCG(1, 7))
	for _, p := range params {
		v := make([]float32, numel(p.Shape))
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.05)
		}
		init[p.Name] = v
	}
	o, err := optimizer.New(ctx, comm, be, params, optimizer.FromMap(init), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var out outcome
	for s := range steps {
		for _, p := range params {
			if err := o.SetGrad(p.Name, stepGrad(p, s)); err != nil {
				t.Fatal(err)
			}
		}
		res, err := o.Step(ctx)
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		out.skipped = append(out.skipped, res.Skipped)
	}
	if out.pieces, err = o.ReadPieces(); err != nil {
		t.Fatal(err)
	}
	out.tensors, out.weights = map[string]*fp8.Tensor{}, map[string][]float32{}
	for _, p := range params {
		if p.HighPrecision {
			out.weights[p.Name], err = o.Weights(p.Name)
		} else {
			out.tensors[p.Name], err = o.Tensor(p.Name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestStep trains on the GPU backend (one rank, collective/single on device
// memory) and on the CPU backend with the same inputs, for every recipe:
// masters, moments, FP8 bytes, scales and high-precision weights must be
// bit-identical.
func TestStep(t *testing.T) {
	b := open(t)
	copier := func(dst, src collective.Buffer) error {
		d, s := dst.(collective.DeviceBuffer), src.(collective.DeviceBuffer)
		return b.Stream().CopyDtoD(ptrOf(d), ptrOf(s), min(d.Size, s.Size))
	}
	for name, cfg := range stepConfigs() {
		t.Run(name, func(t *testing.T) {
			const steps = 6
			got := train(t, single.New(collective.Device, copier), b, cfg, steps)
			want := train(t, single.New(collective.Host, nil), optimizer.NewCPU(2), cfg, steps)
			if !reflect.DeepEqual(got.skipped, want.skipped) {
				t.Errorf("skipped steps: gpu %v, cpu %v", got.skipped, want.skipped)
			}
			if len(got.pieces) != len(want.pieces) {
				t.Fatalf("%d pieces, want %d", len(got.pieces), len(want.pieces))
			}
			for i, w := range want.pieces {
				g := got.pieces[i]
				for _, f := range []struct {
					what      string
					got, want []float32
				}{{"master", g.Master, w.Master}, {"m", g.M, w.M}, {"v", g.V, w.V}} {
					if k := firstDiff(f.got, f.want); k >= 0 {
						t.Errorf("%s@%d %s[%d]: gpu %g, cpu %g", w.Param, w.Offset, f.what, k, f.got[k], f.want[k])
					}
				}
			}
			for n, w := range want.tensors {
				if !reflect.DeepEqual(got.tensors[n], w) {
					t.Errorf("FP8 tensor %s differs from the CPU backend's", n)
				}
			}
			for n, w := range want.weights {
				if k := firstDiff(got.weights[n], w); k >= 0 {
					t.Errorf("weights %s[%d]: gpu %g, cpu %g", n, k, got.weights[n][k], w[k])
				}
			}
		})
	}
}

// firstDiff returns the first index where the bits differ, or -1.
func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func ExampleChoose() {
	be, err := Choose("auto")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer be.Close()
	fmt.Println(be.Memory() == collective.Host || be.Memory() == collective.Device)
	// Output: true
}
