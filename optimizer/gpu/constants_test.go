package gpu

import (
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/distopt/distopt/internal/kernels"
	"github.com/distopt/distopt/optimizer/backend"
)

// The constants that cross the Go/CUDA boundary, checked against the CUDA
// sources without a GPU: the values of Rule and Mode, and the order of the
// Hyper fields in the kernels' struct, parameters and arguments.

// readSource returns the text of a CUDA source of internal/kernels.
func readSource(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../internal/kernels/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// cudaEnum returns the constants of `enum name { A = 1, B = 2 }` in src.
func cudaEnum(t *testing.T, src, name string) map[string]int {
	t.Helper()
	m := regexp.MustCompile(`enum\s+` + name + `\s*\{([^}]*)\}`).FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("no enum %s", name)
	}
	out := map[string]int{}
	for _, item := range strings.Split(m[1], ",") {
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			t.Fatalf("enum %s: %q has no explicit value", name, item)
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			t.Fatalf("enum %s: %q: %v", name, item, err)
		}
		out[strings.TrimSpace(k)] = n
	}
	return out
}

// TestRuleConstants checks that every backend.Rule has RULE_<NAME> of
// the same value in update.cu, and no other rule is there; and that the
// kernels package's values agree.
func TestRuleConstants(t *testing.T) {
	got := cudaEnum(t, readSource(t, "update.cu"), "Rule")
	want := map[string]int{}
	for r := backend.Rule(0); !strings.HasPrefix(r.String(), "Rule("); r++ {
		want["RULE_"+strings.ToUpper(r.String())] = int(r)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("update.cu's Rule is %v, the Go rules %v", got, want)
	}
	for _, c := range []struct {
		k kernels.Rule
		o backend.Rule
	}{{kernels.RuleNone, backend.RuleNone}, {kernels.RuleAdamW, backend.RuleAdamW}, {kernels.RuleSGD, backend.RuleSGD}} {
		if int(c.k) != int(c.o) {
			t.Errorf("kernels rule %d is optimizer rule %v (%d)", c.k, c.o, c.o)
		}
	}
}

// TestModeConstants checks segments.cuh's Mode against backend.Mode and
// the kernels package's mode constants.
func TestModeConstants(t *testing.T) {
	got := cudaEnum(t, readSource(t, "segments.cuh"), "Mode")
	modes := []struct {
		cuda string
		o    backend.Mode
		k    uint32
	}{
		{"MODE_HP", backend.ModeHighPrecision, kernels.ModeHighPrecision},
		{"MODE_CURRENT", backend.ModeTensorCurrent, kernels.ModeTensorCurrent},
		{"MODE_DELAYED", backend.ModeTensorDelayed, kernels.ModeTensorDelayed},
		{"MODE_BLOCK", backend.ModeBlock, kernels.ModeBlock},
		{"MODE_TILE", backend.ModeTile, kernels.ModeTile},
	}
	if len(got) != len(modes) {
		t.Fatalf("segments.cuh has modes %v, Go %d", got, len(modes))
	}
	for _, m := range modes {
		if v, ok := got[m.cuda]; !ok || v != int(m.o) || m.k != uint32(m.o) {
			t.Errorf("%s: CUDA %d (present %t), optimizer %d, kernels %d", m.cuda, v, ok, m.o, m.k)
		}
	}
}

// hyperCUDA names backend.Hyper's fields as update.cu does.
var hyperCUDA = map[string]string{
	"GradScale": "gs", "Beta1": "b1", "Beta2": "b2", "OneMinusBeta1": "omb1",
	"OneMinusBeta2": "omb2", "Eps": "eps", "SqrtVCorrection": "rbc2", "Momentum": "mom",
}

// TestHyperOrder checks that backend.Hyper, kernels.Hyper, update.cu's
// struct Hyper, the float parameters of its kernels (UPDATE_PARAMS) and
// the struct they build (UPDATE_ARGS) list the same fields in the same
// order, and that the launcher passes kernels.Hyper's fields in that order.
func TestHyperOrder(t *testing.T) {
	var want []string
	ot, kt := reflect.TypeFor[backend.Hyper](), reflect.TypeFor[kernels.Hyper]()
	if ot.NumField() != kt.NumField() {
		t.Fatalf("backend.Hyper has %d fields, kernels.Hyper %d", ot.NumField(), kt.NumField())
	}
	for i := range ot.NumField() {
		f := ot.Field(i)
		if kt.Field(i).Name != f.Name || f.Type.Kind() != reflect.Float32 || kt.Field(i).Type.Kind() != reflect.Float32 {
			t.Fatalf("field %d: backend.Hyper.%s (%v), kernels.Hyper.%s (%v)", i, f.Name, f.Type, kt.Field(i).Name, kt.Field(i).Type)
		}
		c, ok := hyperCUDA[f.Name]
		if !ok {
			t.Fatalf("backend.Hyper.%s has no CUDA name in this test", f.Name)
		}
		want = append(want, c)
	}
	src := readSource(t, "update.cu")
	list := func(what, re string) []string {
		m := regexp.MustCompile(re).FindStringSubmatch(src)
		if m == nil {
			t.Fatalf("update.cu: no %s", what)
		}
		var out []string
		for _, s := range strings.Split(strings.ReplaceAll(m[1], "\\\n", ""), ",") {
			s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "float "))
			out = append(out, s)
		}
		return out
	}
	for _, c := range []struct{ what, re string }{
		{"struct Hyper", `struct Hyper \{\s*float ([^;]*);`},
		{"Hyper parameters of UPDATE_PARAMS", `u64 nchunks,\s*((?:float \w+,[\s\\]*)+)u8 \*fp8`},
		{"Hyper{...} of UPDATE_ARGS", `Hyper\{([^}]*)\}`},
	} {
		got := list(c.what, c.re)
		if len(got) > 0 && got[len(got)-1] == "" {
			got = got[:len(got)-1]
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("update.cu's %s is %v, Go's order %v", c.what, got, want)
		}
	}
	var h kernels.Hyper
	v := reflect.ValueOf(&h).Elem()
	for i := range v.NumField() {
		v.Field(i).SetFloat(float64(i + 1))
	}
	for i, x := range h.Floats() {
		if x != float32(i+1) {
			t.Fatalf("kernels.Hyper.Floats()[%d] is field %v, want field %d", i, x-1, i)
		}
	}
}
