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
const mainArgsEnv = "DISTOPT_TRAIN_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"train"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

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
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), mainArgsEnv+"="+c.args, "RANK=")
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
