package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/distopt/distopt/examples/maintest"
	"github.com/distopt/distopt/fp8"
)

// TestHelpAndFlagErrors: -help and -h print the usage to stdout and exit
// 0; a bad or missing flag gives status 2 and one line on stderr that
// names it ("required" for a missing one). Before, -help ended with
// "flag: help requested" and status 2, and -seq 100000 ran out of memory.
func TestHelpAndFlagErrors(t *testing.T) {
	cases := []struct {
		args       []string
		code       int
		out, stErr string
	}{
		{[]string{"-help"}, 0, "usage: gpt [flags]", ""},
		{[]string{"-h"}, 0, "-preset string", ""},
		{[]string{"-resume"}, 2, "", "gpt: -ckpt is required with -resume"},
		{[]string{"-seq", "100000"}, 2, "", "gpt: -seq=100000: longer than the 64 positions of preset tiny"},
		{[]string{"-preset", "small", "-seq", "1025"}, 2, "", "gpt: -seq=1025: longer than the 1024 positions of preset small"},
		{[]string{"-batch", "0"}, 2, "", "gpt: -batch=0: want at least 1"},
		{[]string{"-eval-windows", "-1"}, 2, "", "gpt: -eval-windows=-1: want at least 1"},
		{[]string{"-bogus"}, 2, "", "gpt: flag provided but not defined: -bogus (gpt -help lists the flags)"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(c.args, &out, &errOut)
			if code != c.code {
				t.Errorf("status %d, want %d", code, c.code)
			}
			if c.out != "" && !strings.Contains(out.String(), c.out) || c.out == "" && out.Len() != 0 {
				t.Errorf("stdout %q, want it to hold %q", out.String(), c.out)
			}
			if c.stErr == "" && errOut.Len() != 0 || c.stErr != "" && !maintest.OneLine(errOut.String(), c.stErr) {
				t.Errorf("stderr %q, want one line starting %q", errOut.String(), c.stErr)
			}
		})
	}
}

// TestPrintableEscapes checks printable against cases written out and,
// for random byte strings, against strconv.Unquote as the independent
// reference: the output holds no control character but newline and tab,
// is valid UTF-8, and reads back (as the body of a Go string literal) to
// the very bytes generated. Before, control bytes became '.', and invalid
// UTF-8 reached the terminal raw.
func TestPrintableEscapes(t *testing.T) {
	cases := []struct{ in, want string }{
		{"func main() {\n\tx := 1\n}", "func main() {\n\tx := 1\n}"},
		{"\x1b[31mred", `\x1b[31mred`},
		{"a\rb\x00c\x7f", `a\rb\x00c\x7f`},
		{"\xff\xfe", `\xff\xfe`},
		{"caf\xc3", `caf\xc3`},
		{"café ünïcode", "café ünïcode"},
		{`back\slash`, `back\\slash`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"\u0085next line", `\u0085next line`},
	}
	for _, c := range cases {
		if got := printable([]byte(c.in)); got != c.want {
			t.Errorf("printable(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		got := printable(b)
		for _, c := range got {
			if c != '\n' && c != '\t' && !unicode.IsPrint(c) {
				t.Fatalf("printable(%q) = %q holds %U", b, got, c)
			}
		}
		if !utf8.ValidString(got) {
			t.Fatalf("printable(%q) = %q is not UTF-8", b, got)
		}
		lit := strings.NewReplacer("\n", `\n`, "\t", `\t`, `"`, `\"`).Replace(got)
		back, err := strconv.Unquote(`"` + lit + `"`)
		if err != nil || back != string(b) {
			t.Fatalf("printable(%q) = %q reads back as %q (%v)", b, got, back, err)
		}
	}
}

// TestVerboseLogger checks that -v gives the optimizer a debug logger and
// that the default is silent (a nil logger).
func TestVerboseLogger(t *testing.T) {
	if l := (options{}).config().Logger; l != nil {
		t.Errorf("without -v the optimizer's logger is %v, want nil", l)
	}
	l := (options{verbose: true}).config().Logger
	if l == nil || !l.Enabled(context.Background(), slog.LevelDebug) {
		t.Errorf("with -v the optimizer's logger is %v, want one enabled at debug level", l)
	}
}

// TestRecipeFlag checks -recipe against fp8.ParseRecipe, the independent
// reference of the names: without the flag the weights' recipe is delayed
// scaling (Transformer Engine's default on Hopper, what README.md and
// docs/GPT.md call the default); -recipe current and tile still choose
// theirs; an unknown name is refused naming the flag.
func TestRecipeFlag(t *testing.T) {
	for _, c := range []struct{ args []string }{{nil}, {[]string{"-recipe", "current"}}, {[]string{"-recipe", "tile"}}} {
		o, err := parseFlags(c.args)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		name := "delayed"
		if c.args != nil {
			name = c.args[1]
		}
		want, err := fp8.ParseRecipe(name)
		if err != nil {
			t.Fatal(err)
		}
		if o.recipe != want {
			t.Errorf("%v: recipe %v, want %v", c.args, o.recipe, want)
		}
	}
	if o, _ := parseFlags(nil); o.recipe.Scaling != fp8.TensorDelayed {
		t.Errorf("default recipe %v, want delayed scaling", o.recipe)
	}
	if _, err := parseFlags([]string{"-recipe", "bogus"}); err == nil || !strings.Contains(err.Error(), "-recipe") {
		t.Errorf("-recipe bogus: %v, want an error naming -recipe", err)
	}
}

// TestActHistoryFlag checks -act-history: 1024 by default on the GPU's
// fused forward with per-tensor activations and 0 where it does not apply
// (the CPU, -recompute, -recipe tile), the length given handed to the GPU
// model's options, and refused (naming the flag) when negative, on the
// CPU, with -recompute and with -recipe tile.
func TestActHistoryFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"-backend", "gpu"}, 1024},
		{[]string{"-backend", "gpu", "-recipe", "current"}, 1024},
		{[]string{"-backend", "gpu", "-act-history", "16"}, 16},
		{[]string{"-backend", "gpu", "-act-history", "0"}, 0},
		{[]string{"-backend", "gpu", "-recompute"}, 0},
		{[]string{"-backend", "gpu", "-recipe", "tile"}, 0},
		{[]string{"-backend", "cpu"}, 0},
	} {
		o, err := parseFlags(c.args)
		if err != nil || o.actHistory != c.want || (c.args[1] == "gpu" && o.modelOptions().DelayedActivations != c.want) {
			t.Errorf("%v: %v, -act-history %d, want %d", c.args, err, o.actHistory, c.want)
		}
		if want := fmt.Sprintf("history %d)", c.want); (c.want > 0) != strings.HasSuffix(o.activationScaling(), want) {
			t.Errorf("%v: the run's line says %q", c.args, o.activationScaling())
		}
	}
	for _, args := range [][]string{
		{"-backend", "gpu", "-act-history", "-1"},
		{"-act-history", "16"},
		{"-backend", "gpu", "-act-history", "16", "-recompute"},
		{"-backend", "gpu", "-act-history", "16", "-recipe", "tile"},
	} {
		if _, err := parseFlags(args); err == nil || !strings.Contains(err.Error(), "-act-history") {
			t.Errorf("%v: %v, want an error naming -act-history", args, err)
		}
	}
}

// TestSetModelStateRefusals checks, without a GPU (the model is never
// reached), that a resume refuses a checkpoint without activation
// histories under -act-history and one with them without it, naming the
// flag, and takes a checkpoint without them without it.
func TestSetModelStateRefusals(t *testing.T) {
	for _, c := range []struct {
		history int
		state   []byte
		ok      bool
	}{{16, nil, false}, {0, []byte{1}, false}, {0, nil, true}} {
		err := setModelState(options{actHistory: c.history}, nil, c.state)
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "-act-history")) {
			t.Errorf("-act-history %d, state %v: %v", c.history, c.state, err)
		}
	}
}
