package main

import (
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, "train", main) }

// TestBadFlags runs the command with each bad value of issue 38: it exits
// with status 2 and one line on stderr that names the flag, having
// printed nothing else. Before, -steps 0, -ranks 0, -ranks -3 and -batch
// -5 panicked, -batch 0 trained to NaN and exited 0, and -backend tpu and
// -backend gpu (outside the launcher) trained on the CPU.
func TestBadFlags(t *testing.T) {
	cases := []struct{ args, says string }{
		{"-steps 0", "train: -steps=0: want at least 1"},
		{"-ranks 0 -steps 2", "train: -ranks=0: want 1 to 65536"},
		{"-ranks -3 -steps 2", "train: -ranks=-3: want 1 to 65536"},
		{"-batch -5 -steps 2", "train: -batch=-5: want at least 1"},
		{"-batch 0 -steps 2", "train: -batch=0: want at least 1"},
		{"-backend tpu -steps 2", `train: -backend="tpu": want cpu or gpu`},
		{"-backend gpu -steps 2", "train: -backend gpu runs one process per GPU: start it with distopt run"},
	}
	for _, c := range cases {
		t.Run(c.args, func(t *testing.T) {
			code, stdout, stderr := maintest.Run(t, c.args, "RANK=")
			if code != 2 || stdout != "" || !maintest.OneLine(stderr, c.says) {
				t.Errorf("status %d, stdout %q, stderr %q; want 2, nothing, and one line starting %q", code, stdout, stderr, c.says)
			}
		})
	}
}

// TestVerbose checks that -v hands the optimizer a logger: the CPU
// backend's fallback paths are logged at debug level, and nothing is
// logged without -v.
func TestVerbose(t *testing.T) {
	for _, c := range []struct {
		args string
		want bool
	}{{"-steps 2 -ranks 2 -v", true}, {"-steps 2 -ranks 2", false}} {
		code, _, stderr := maintest.Run(t, c.args, "RANK=")
		if code != 0 {
			t.Fatalf("%s: status %d, stderr %q", c.args, code, stderr)
		}
		if got := strings.Contains(stderr, "level=DEBUG") && strings.Contains(stderr, "no DeviceScaler"); got != c.want {
			t.Errorf("%s: debug log of the fallback paths on stderr: %t, want %t (stderr %q)", c.args, got, c.want, stderr)
		}
	}
}

// TestHelpToStdout checks that -help and -h print the usage to stdout with
// status 0, and that a bad flag still goes to stderr with status 2.
func TestHelpToStdout(t *testing.T) { maintest.CheckHelp(t, "RANK=") }
