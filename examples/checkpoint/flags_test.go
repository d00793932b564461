package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// mainArgsEnv, when set, makes the test binary run main with these
// arguments instead of the tests: the tests run it so to see how the
// command ends.
const mainArgsEnv = "DISTOPT_CHECKPOINT_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"checkpoint"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

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
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), mainArgsEnv+"="+c.args)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("exit: %v, want status 2", err)
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], c.says) || stdout.Len() != 0 {
				t.Errorf("stderr %q, stdout %q; want only one line starting %q", stderr.String(), stdout.String(), c.says)
			}
		})
	}
}
