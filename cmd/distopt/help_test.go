package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHelpToStdout asks every subcommand with flags for help, each way a
// user may: the usage goes to stdout, stderr stays empty and the status
// is 0, as for `distopt help`.
func TestHelpToStdout(t *testing.T) {
	var out, errb bytes.Buffer
	defer func(w io.Writer) { stdout = w }(stdout)
	stdout = &out
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	require.NoError(t, err)
	defer func(f *os.File) { os.Stderr = f }(os.Stderr)
	os.Stderr = errFile // the subcommands write their errors there
	for _, cmd := range []string{"run", "plan", "export"} {
		for _, args := range [][]string{{"help", cmd}, {cmd, "-h"}, {cmd, "--help"}, {cmd, "-help"}} {
			out.Reset()
			errb.Reset()
			assert.Equal(t, 0, dispatch(args, &errb), "%q: status", args)
			assert.Contains(t, out.String(), "usage: distopt "+cmd, "%q: stdout", args)
			assert.Empty(t, errb.String(), "%q: dispatch's stderr", args)
		}
	}
	written, err := os.ReadFile(errFile.Name())
	require.NoError(t, err)
	assert.Empty(t, string(written), "stderr of the subcommands")
}

// TestRequiredFlags checks that a missing required argument says so,
// rather than naming a zero value.
func TestRequiredFlags(t *testing.T) {
	_, err := parseRun([]string{"--", "true"}, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--nproc-per-node is required")
	var out, errb bytes.Buffer
	assert.Equal(t, 2, runExport([]string{"ckpt"}, &out, &errb))
	assert.Contains(t, errb.String(), "are required")
}
