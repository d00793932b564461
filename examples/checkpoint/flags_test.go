package main

import (
	"testing"

	"github.com/distopt/distopt/examples/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, "checkpoint", main) }

// TestBadFlags runs the command with bad values: it exits with status 2
// and one line on stderr that names the flag. Before, -load-ranks 0
// panicked.
func TestBadFlags(t *testing.T) {
	cases := []struct{ args, says string }{
		{"-load-ranks 0", "checkpoint: -load-ranks=0: want 1 to 65536"},
		{"-save-ranks -2", "checkpoint: -save-ranks=-2: want 1 to 65536"},
		{"-steps 0", "checkpoint: -steps=0: want at least 1"},
		{"-steps 4 -save-at 4", "checkpoint: -save-at=4: want 0 to -steps-1 (3)"},
	}
	for _, c := range cases {
		t.Run(c.args, func(t *testing.T) {
			code, stdout, stderr := maintest.Run(t, c.args)
			if code != 2 || stdout != "" || !maintest.OneLine(stderr, c.says) {
				t.Errorf("status %d, stdout %q, stderr %q; want 2, nothing, and one line starting %q", code, stdout, stderr, c.says)
			}
		})
	}
}

// TestHelpToStdout checks that -help and -h print the usage to stdout with
// status 0, and that a bad flag still goes to stderr with status 2.
func TestHelpToStdout(t *testing.T) { maintest.CheckHelp(t, "RANK=") }
