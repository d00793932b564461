package ptxgen

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

// ptxOf returns PTX text for target sm_arch defining the kernels names.
func ptxOf(arch int, names ...string) *fstest.MapFile {
	s := fmt.Sprintf("// Cuda compilation tools, release 11.8\n\n.version 7.8\n.target sm_%d\n.address_size 64\n", arch)
	for _, n := range names {
		s += ".visible .entry " + n + "(\n)\n"
	}
	return &fstest.MapFile{Data: []byte(s)}
}

// wantErrors checks that errs holds one error containing each of want.
func wantErrors(t *testing.T, errs []error, want ...string) {
	t.Helper()
	if len(errs) != len(want) {
		t.Errorf("%d errors %v, want %d", len(errs), errs, len(want))
	}
	for _, w := range want {
		found := false
		for _, err := range errs {
			found = found || strings.Contains(err.Error(), w)
		}
		if !found {
			t.Errorf("no error mentions %q: %v", w, errs)
		}
	}
}

// TestChecks gives each check a tree with one fault of each kind it looks
// for, and a sound tree.
func TestChecks(t *testing.T) {
	fsys := fstest.MapFS{
		"ptx/a_sm80.ptx":           ptxOf(80, "k1", "k2"),
		"ptx/a_sm90.ptx":           ptxOf(90, "k1"),
		"ptx/b_sm80.ptx":           ptxOf(80, "k3"),
		"cubin/a_sm80.sm_90.cubin": {Data: []byte("misplaced")},
	}
	wantErrors(t, CheckKernels(fsys, []string{"k1", "k3", "k4"}),
		"variants define different kernels", "defines k2, which no launcher requests", "no PTX for module \"b\", variant sm90",
		"kernel k4 is requested")
	wantErrors(t, CheckCubins(fsys, map[string]bool{"b": true, "c": true}),
		"ptxonly names c", "a_sm80: cubins for [90], want sm_80 only", "a_sm90: cubins for [], want sm_90 only",
		"no PTX for module \"b\", variant sm90")
	fsys["ptx/b_sm90.ptx"] = ptxOf(80, "k3")
	fsys["ptx/c_sm80.ptx"] = &fstest.MapFile{Data: []byte("\n.version 7.8\n.target sm_80\n.address_size 64\ncvt.rn.f16x2.e4m3x2\n")}
	fsys["ptx/c_sm90.ptx"] = ptxOf(90, "k5")
	wantErrors(t, CheckTargets(fsys), `b_sm90: PTX lacks "\n.target sm_90`, "c_sm80: PTX lacks \"Cuda compilation tools",
		"c_sm80: sm80 PTX uses the hardware conversion")
	sound := fstest.MapFS{"ptx/a_sm80.ptx": ptxOf(80, "k1"), "ptx/a_sm90.ptx": ptxOf(90, "k1"), "cubin/README": {}}
	wantErrors(t, append(append(CheckKernels(sound, []string{"k1"}), CheckCubins(sound, map[string]bool{"a": true})...), CheckTargets(sound)...))
	wantErrors(t, CheckKernels(fstest.MapFS{}, nil), "no embedded modules")
}
