package main

import (
	"strings"
	"testing"
)

// TestActGradFlag checks -act-grad: bf16 by default on the GPU with
// per-tensor recipes and without -recompute (the fused backward), fp32
// otherwise and when asked; bf16 (any case) threaded to the model's
// options; an
// unknown type refused naming the flag, and the flag refused on the CPU
// path, which computes in float64.
func TestActGradFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"-backend", "gpu"}, true}, {[]string{"-backend", "gpu", "-act-grad", "BF16"}, true},
		{[]string{"-backend", "gpu", "-act-grad", "fp32"}, false}, {[]string{"-backend", "gpu", "-recompute"}, false},
		{[]string{"-backend", "gpu", "-recipe", "tile"}, false}, {[]string{"-backend", "gpu", "-recipe", "delayed"}, true}} {
		o, err := parseFlags(c.args)
		if err != nil {
			t.Errorf("%v refused: %v", c.args, err)
			continue
		}
		if o.modelOptions().ActGradBF16 != c.want {
			t.Errorf("%v: ActGradBF16 %v, want %v", c.args, o.modelOptions().ActGradBF16, c.want)
		}
	}
	for _, c := range []struct{ args []string }{
		{[]string{"-backend", "gpu", "-act-grad", "fp16"}}, {[]string{"-act-grad", "bf16"}},
	} {
		var out, errOut strings.Builder
		if code := run(c.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "-act-grad") {
			t.Errorf("%v: status %d, stderr %q; want 2 and a line naming -act-grad", c.args, code, errOut.String())
		}
	}
}
