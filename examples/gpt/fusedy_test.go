package main

import (
	"io"
	"math"
	"strings"
	"testing"

	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/optimizer/gpu"
)

// TestFuseDYFlag checks -fuse-dy: off by default, on when given and
// threaded to the GPU model's options; refused on the CPU path and with
// 128x128 weights (whose activations take 1x128 blocks), naming the flag.
func TestFuseDYFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{{[]string{"-backend", "gpu"}, false}, {[]string{"-backend", "gpu", "-fuse-dy"}, true},
		{[]string{"-backend", "gpu", "-fuse-dy", "-recipe", "delayed"}, true}} {
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

// TestGPUFuseDY trains the small model 10 steps with and without
// -fuse-dy, with float32 and with bfloat16 activation gradients: the
// losses must be the same bits (the fused cast writes the codes and bias
// sums of the separate passes, so every step sees the same gradients).
func TestGPUFuseDY(t *testing.T) {
	be, err := gpu.New(0)
	cudatest.Unavailable(t, err, gpu.ErrUnavailable)
	be.Close()
	dir := writeData(t)
	for _, actGrad := range []string{"fp32", "bf16"} {
		var losses [2][]float64
		for i, extra := range [][]string{nil, {"-fuse-dy"}} {
			args := append([]string{"-backend", "gpu", "-data", dir, "-layers", "2", "-hidden", "128", "-heads", "2", "-ffn", "256",
				"-seq", "64", "-batch", "4", "-micro", "2", "-steps", "10", "-lr", "1e-2", "-eval-every", "0", "-eval-windows", "4",
				"-sample", "0", "-act-grad", actGrad}, extra...)
			o, err := parseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			if losses[i], err = gpuRun(o, io.Discard); err != nil {
				t.Fatal(err)
			}
		}
		a, b := losses[0], losses[1]
		if len(a) != 10 || len(b) != 10 {
			t.Fatalf("-act-grad %s: %d and %d losses, want 10", actGrad, len(a), len(b))
		}
		for i := range a {
			if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
				t.Errorf("-act-grad %s, step %d: loss %v with -fuse-dy, %v without", actGrad, i+1, b[i], a[i])
			}
		}
		t.Logf("-act-grad %s: losses%s", actGrad, fmtLosses(a))
	}
}
