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
	"path/filepath"
	"runtime"

	"github.com/distopt/distopt/examples/gpt/data"
	"github.com/distopt/distopt/internal/progress"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", filepath.Join(runtime.GOROOT(), "src"), "directory of the text")
	out := fs.String("out", "data/gpt", "directory of the token files")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "prepare: unexpected arguments %q\n", fs.Args())
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
