// Command prepare writes the token files of examples/gpt: the Go
// distribution's source tree (GOROOT/src by default) tokenized byte by
// byte, split by file into training and validation sets (see package
// examples/gpt/data).
//
//	go run ./examples/gpt/prepare -out data/gpt
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/internal/progress"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", defaultRoot(), "directory of the text (default: GOROOT/src of the go command on PATH, or of this binary's toolchain)")
	out := fs.String("out", "data/gpt", "directory of the token files")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "prepare: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *root == "" {
		fmt.Fprintln(stderr, "prepare: no Go toolchain found for the default text (GOROOT/src): give -root DIR")
		return 2
	}
	meta, err := data.Prepare(*root, *out, progress.Terminal(os.Stderr, "reading "+*root, true))
	if err != nil {
		fmt.Fprintln(stderr, "prepare:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d training files (%d tokens), %d validation files (%d tokens), %d skipped; written to %s\n",
		meta.Root, meta.Train.Files, meta.Train.Tokens, meta.Valid.Files, meta.Valid.Tokens, meta.Skipped, *out)
	return 0
}

// defaultRoot is GOROOT/src: of `go env GOROOT` when a go command is on
// PATH, else the toolchain this binary was built with (runtime.GOROOT,
// empty for -trimpath builds: then "", which run refuses).
func defaultRoot() string {
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		if g := strings.TrimSpace(string(out)); g != "" {
			return filepath.Join(g, "src")
		}
	}
	if g := runtime.GOROOT(); g != "" {
		return filepath.Join(g, "src")
	}
	return ""
}
