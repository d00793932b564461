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
	"github.com/schollz/progressbar/v3"
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
	meta, err := data.Prepare(*root, *out, terminalBar("reading "+*root))
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

// terminalBar returns a report of bytes read that draws a bar on standard
// error when it is a terminal, and nil (quiet) otherwise, so that logs get
// no control characters.
func terminalBar(desc string) func(done, total int64) {
	if st, err := os.Stderr.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	var bar *progressbar.ProgressBar
	return func(done, total int64) {
		if bar == nil {
			bar = progressbar.DefaultBytes(total, desc)
		}
		_ = bar.Set64(done) // a failed write to the terminal is not the work's failure
	}
}
