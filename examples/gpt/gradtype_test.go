package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/examples/gpt/gpumodel"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// TestGradTypeFlag checks -grad-type: bf16 by default on both paths (the
// CPU path's gradients are bfloat16 whatever the flag), bf16 or fp32 (any
// case) on the GPU path threaded to the optimizer's and the model's
// configurations; unknown types refused naming the flag, and the flag
// refused on the CPU path (whose gradients stay in the optimizer's
// default, bfloat16) but with -export-init.
func TestGradTypeFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want buffer.DType
	}{{nil, buffer.BFloat16}, {[]string{"-backend", "gpu"}, buffer.BFloat16}, {[]string{"-backend", "gpu", "-grad-type", "BF16"}, buffer.BFloat16},
		{[]string{"-backend", "gpu", "-grad-type", "fp32"}, buffer.Float32}, {[]string{"-grad-type", "bf16", "-export-init", "x"}, buffer.BFloat16}} {
		o, err := parseFlags(c.args)
		if err != nil {
			t.Errorf("%v refused: %v", c.args, err)
			continue
		}
		if o.gradType != c.want || o.gpuConfig().GradType != c.want || o.modelOptions().GradType != c.want {
			t.Errorf("%v: gradient type %v, optimizer %v, model %v; want %v", c.args, o.gradType, o.gpuConfig().GradType, o.modelOptions().GradType, c.want)
		}
		if o.config().GradType != 0 {
			t.Errorf("%v: the CPU path's configuration has gradient type %v, want the optimizer's default", c.args, o.config().GradType)
		}
	}
	for _, c := range []struct{ args []string }{
		{[]string{"-backend", "gpu", "-grad-type", "fp16"}}, {[]string{"-backend", "gpu", "-grad-type", ""}},
		{[]string{"-grad-type", "bf16"}}, {[]string{"-grad-type", "fp32"}},
	} {
		var out, errOut strings.Builder
		if code := run(c.args, &out, &errOut); code != 2 || !strings.HasPrefix(errOut.String(), "gpt: -grad-type") {
			t.Errorf("%v: status %d, stderr %q; want 2 and a line on -grad-type", c.args, code, errOut.String())
		}
	}
}

// predictedPeak returns the predicted device memory of a GPU run of o on
// one GPU: the optimizer's buffers (optimizer.PredictMemory) and the
// model's activations for one micro-batch (gpumodel.PredictMemory, its
// engine's activation buffer included). Not counted: cuBLASLt's
// workspaces, the engine's product scratch and the kernels' scratch.
func predictedPeak(o options) (opt, act int64, err error) {
	r, err := optimizer.PredictMemory(o.shape.Params(), 1, o.gpuConfig())
	if err != nil {
		return 0, 0, err
	}
	m, err := gpumodel.PredictMemory(o.shape, o.batch, o.shape.Seq, o.modelOptions())
	if err != nil {
		return 0, 0, err
	}
	return r.Total(), int64(m.Step()), nil
}

// TestPredictedPeak logs the predicted memory of the 1.3B preset at 4 x
// 2048 (recipe current) for -grad-type fp32 and bf16, with -moments fp32
// and fp8,bf16 (the default), alone and with -recompute (the table of docs/BENCHMARKS.md), and
// checks each bf16 prediction against its fp32 one: the optimizer's
// gradients halved exactly (2 of 4 bytes per gradient element, padding
// included), and 4 bytes of float32 sums more per element of the small
// parameters (every bias, LayerNorm and embedding, counted here from the
// shape).
func TestPredictedPeak(t *testing.T) {
	const gib = 1 << 30
	t.Logf("%-40s %9s %9s %9s %8s", "flags", "optimizer", "activ.", "total", "/ 29.61")
	for _, extra := range [][]string{{"-moments", "fp32"}, {"-moments", "fp8,bf16"}, {"-moments", "fp32", "-recompute"}, {"-moments", "fp8,bf16", "-recompute"}} {
		var fp32 [2]int64
		for _, gt := range []string{"fp32", "bf16"} {
			args := append([]string{"-backend", "gpu", "-preset", "1.3b", "-recipe", "current", "-grad-type", gt}, extra...)
			o, err := parseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			opt, act, err := predictedPeak(o)
			if err != nil {
				t.Fatal(err)
			}
			total := float64(opt+act) / gib
			t.Logf("%-40s %9.2f %9.2f %9.2f %8.3f", strings.Join(args[6:], " "), float64(opt)/gib, float64(act)/gib, total, total/29.61)
			if gt == "fp32" {
				fp32 = [2]int64{opt, act}
				continue
			}
			r, err := optimizer.PredictMemory(o.shape.Params(), 1, o.gpuConfig())
			if err != nil {
				t.Fatal(err)
			}
			h, f, L := int64(o.shape.Hidden), int64(o.shape.FFN), int64(o.shape.Layers)
			small := int64(o.shape.Vocab)*h + int64(o.shape.Seq)*h + L*(9*h+f) + 2*h
			if g := r.Get(optimizer.BufGrads); opt != fp32[0]-g || act != fp32[1]+4*small {
				t.Errorf("%v: optimizer %d, activations %d bytes; want %d - %d and %d + 4 x %d", args, opt, act, fp32[0], g, fp32[1], small)
			}
		}
	}
}

// TestGPUGradTypeBF16 trains the example on one GPU for 30 steps with
// -grad-type fp32 and bf16 from the same weights and batches (a 2-layer
// model on a repetitive text, lr 1e-2, recipe current). The first step's
// loss must be the same bits (its forward pass reads no gradient); the
// second and third within 0.5% of fp32's (each reads one or two updates
// from gradients that differ by at most 2^-9 relative per element, which
// Adam's normalized update passes on about unchanged: measured 0.03% on an
// H200); both runs must fall by at least 1 nat, and the mean of the last
// five losses stay within 10% of fp32's. Why the loose end: at this
// learning rate the tiny model's loss spikes (steps 15 and 18 in one run of
// 2026-12-05), after which the two runs are different trajectories (-3.5%
// at the end that day). A gradient summed into the wrong view, or not at
// all, already moves the second step's loss by far more than 0.5%. The
// 2000-step check of issue 37's 1% criterion is scripts/gpu/gpt_long.sh's
// part gradtype, on a GPU.
func TestGPUGradTypeBF16(t *testing.T) {
	be, err := gpu.New(0)
	cudatest.Unavailable(t, err, gpu.ErrUnavailable)
	be.Close()
	dir := writeData(t)
	losses := map[string][]float64{}
	for _, gt := range []string{"fp32", "bf16"} {
		o, err := parseFlags([]string{"-backend", "gpu", "-data", dir, "-layers", "2", "-hidden", "128", "-heads", "2", "-ffn", "256",
			"-seq", "64", "-batch", "4", "-micro", "2", "-steps", "30", "-lr", "1e-2", "-eval-every", "0", "-eval-windows", "4",
			"-sample", "0", "-grad-type", gt})
		if err != nil {
			t.Fatal(err)
		}
		if losses[gt], err = gpuRun(o, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	a, b := losses["fp32"], losses["bf16"]
	if len(a) != 30 || len(b) != 30 {
		t.Fatalf("%d and %d losses, want 30", len(a), len(b))
	}
	if math.Float64bits(a[0]) != math.Float64bits(b[0]) {
		t.Errorf("first loss %v with bf16 gradients, %v with fp32: the forward pass differs", b[0], a[0])
	}
	for i := 1; i < 3; i++ {
		if rel := b[i]/a[i] - 1; !(math.Abs(rel) <= 0.005) {
			t.Errorf("step %d: loss %.4f with bf16 gradients, %.4f with fp32 (%+.2f%%), want within 0.5%%", i+1, b[i], a[i], 100*rel)
		}
	}
	var ma, mb float64
	for i := len(a) - 5; i < len(a); i++ {
		ma, mb = ma+a[i]/5, mb+b[i]/5
	}
	t.Logf("losses fp32 %s", fmtLosses(a))
	t.Logf("losses bf16 %s", fmtLosses(b))
	if rel := mb/ma - 1; !(math.Abs(rel) <= 0.1) || !(ma < a[0]-1) || !(mb < b[0]-1) {
		t.Errorf("last five steps: mean loss %.4f with bf16 gradients, %.4f with fp32 (%+.2f%%), first %.4f: want within 10%% and a fall of 1 nat in each", mb, ma, 100*rel, a[0])
	}
}

func fmtLosses(x []float64) string {
	var b strings.Builder
	for _, v := range x {
		fmt.Fprintf(&b, " %.4f", v)
	}
	return b.String()
}
