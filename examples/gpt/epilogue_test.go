package main

import (
	"strings"
	"testing"
)

// TestEpilogueFlag checks -epilogue: on by default on the GPU with
// per-tensor recipes (current and delayed) without -recompute, whose
// unfused forward has no epilogue to write into; off with 128x128 weights,
// on the CPU path and when -epilogue=false; an explicit -epilogue with
// -recompute refused, not silently dropped.
func TestEpilogueFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"-backend", "gpu"}, true}, {[]string{"-backend", "gpu", "-recipe", "delayed"}, true},
		{[]string{"-backend", "gpu", "-recipe", "tile"}, false}, {[]string{"-backend", "gpu", "-recompute"}, false},
		{[]string{"-backend", "gpu", "-epilogue=false"}, false}, {[]string{"-backend", "gpu", "-recipe", "tile", "-epilogue"}, true}} {
		o, err := parseFlags(c.args)
		if err != nil {
			t.Errorf("%v refused: %v", c.args, err)
			continue
		}
		if got := o.modelOptions().Epilogue; got != c.want {
			t.Errorf("%v: Epilogue %v, want %v", c.args, got, c.want)
		}
	}
	if _, err := parseFlags([]string{"-backend", "gpu", "-recompute", "-epilogue"}); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Errorf("-epilogue with -recompute: error %v, want one saying to choose", err)
	}
}
