package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/optimizer/gpu"
)

// TestFuseDYFlag checks -fuse-dy: on by default on the GPU with
// per-tensor recipes, off by default on the CPU path and with 128x128
// weights (whose activations take 1x128 blocks), off when -fuse-dy=false,
// and threaded to the GPU model's options; asked for where it cannot run,
// it is refused, naming the flag.
func TestFuseDYFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{{[]string{"-backend", "gpu"}, true}, {[]string{"-backend", "gpu", "-fuse-dy"}, true},
		{[]string{"-backend", "gpu", "-fuse-dy=false"}, false}, {[]string{"-backend", "gpu", "-recipe", "delayed"}, true},
		{[]string{"-backend", "gpu", "-recipe", "tile"}, false}, {[]string{"-backend", "cpu"}, false},
		{[]string{"-backend", "cpu", "-fuse-dy=false"}, false}} {
		o, err := parseFlags(c.args)
		if err != nil {
			t.Errorf("%v refused: %v", c.args, err)
			continue
		}
		if o.modelOptions().FuseDY != c.want {
			t.Errorf("%v: FuseDY %v, want %v", c.args, o.modelOptions().FuseDY, c.want)
		}
	}
	for _, args := range [][]string{{"-fuse-dy"}, {"-backend", "gpu", "-fuse-dy", "-recipe", "tile"}} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "-fuse-dy") {
			t.Errorf("%v: status %d, stderr %q; want 2 and a line naming -fuse-dy", args, code, errOut.String())
		}
	}
}

// gpuSmall trains the tests' small model (2 layers 128 wide, FFN 512:
// attention's gradient shares mlp.fc's buffer) steps steps on GPU 0 with
// the extra flags, writing the run's output to out, and returns its
// losses. It skips the test without a GPU.
func gpuSmall(t *testing.T, dir string, steps int, out io.Writer, extra ...string) []float64 {
	t.Helper()
	be, err := gpu.New(0)
	cudatest.Unavailable(t, err, gpu.ErrUnavailable)
	be.Close()
	args := append([]string{"-backend", "gpu", "-data", dir, "-layers", "2", "-hidden", "128", "-heads", "2", "-ffn", "512",
		"-seq", "64", "-batch", "4", "-micro", "2", "-steps", fmt.Sprint(steps), "-lr", "1e-2", "-eval-every", "0", "-eval-windows", "4",
		"-sample", "0"}, extra...)
	o, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	losses, err := gpuRun(o, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(losses) != steps {
		t.Fatalf("%v: %d losses, want %d", extra, len(losses), steps)
	}
	return losses
}

// sameLosses reports each step whose loss differs in its bits.
func sameLosses(t *testing.T, what string, got, want []float64) {
	t.Helper()
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Errorf("%s, step %d: loss %v, %v without", what, i+1, got[i], want[i])
		}
	}
}

// TestGPUFuseDY trains the small model 10 steps with -fuse-dy and with
// -fuse-dy=false, with float32 and with bfloat16 activation gradients: the
// losses must be the same bits (the fused cast writes the codes and bias
// sums of the separate passes, so every step sees the same gradients).
func TestGPUFuseDY(t *testing.T) {
	dir := writeData(t)
	for _, actGrad := range []string{"fp32", "bf16"} {
		a := gpuSmall(t, dir, 10, io.Discard, "-act-grad", actGrad, "-fuse-dy=false")
		b := gpuSmall(t, dir, 10, io.Discard, "-act-grad", actGrad, "-fuse-dy")
		sameLosses(t, "-act-grad "+actGrad+" -fuse-dy", b, a)
		t.Logf("-act-grad %s: losses%s", actGrad, fmtLosses(a))
	}
}
