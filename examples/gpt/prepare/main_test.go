package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/gpt/data"
)

// TestRun prepares a generated tree and reads the token files back: the
// two splits together hold every file's bytes and one separator per file.
func TestRun(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	total := 0
	for i := range 100 {
		body := fmt.Sprintf("package p%d\n\n// F returns %d.\nfunc F() int { return %d }\n", i, i, i)
		total += len(body) + 1
		p := filepath.Join(root, fmt.Sprintf("p%02d", i/10), fmt.Sprintf("f%d.go", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-root", root, "-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	n := 0
	for _, f := range []string{data.TrainFile, data.ValidFile} {
		_, toks, err := data.ReadTokens(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		n += len(toks)
	}
	if n != total || !strings.Contains(stdout.String(), "training files") {
		t.Fatalf("%d tokens in the splits, want %d; output %q", n, total, stdout.String())
	}
	if code := run([]string{"-root", filepath.Join(root, "missing")}, &stdout, &stderr); code != 1 {
		t.Errorf("missing root: exit %d, want 1", code)
	}
}
