package main

import (
	"slices"
	"strings"
	"testing"
)

// TestKeepTransposedLayersFlag checks -keep-transposed-layers: the named
// layers reach the model's options in order; a name that is no linear
// layer of a block is refused naming the flag and the layers it takes;
// the flag is refused with -recompute (which keeps no input of those
// layers) and on the CPU path.
func TestKeepTransposedLayersFlag(t *testing.T) {
	o, err := parseFlags([]string{"-backend", "gpu", "-keep-transposed-layers", "mlp.proj,attn.qkv"})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.modelOptions().KeepTransposedLayers; !slices.Equal(got, []string{"mlp.proj", "attn.qkv"}) {
		t.Errorf("KeepTransposedLayers %q, want [mlp.proj attn.qkv]", got)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-backend", "gpu", "-keep-transposed-layers", "mlp.fc2"}, "mlp.proj"},
		{[]string{"-backend", "gpu", "-keep-transposed-layers", "mlp.fc,"}, "-keep-transposed-layers"},
		{[]string{"-backend", "gpu", "-recompute", "-keep-transposed-layers", "mlp.proj"}, "choose one"},
		{[]string{"-keep-transposed-layers", "mlp.proj"}, "options of the GPU model"},
	} {
		if _, err := parseFlags(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}
