package maintest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// argsEnv holds the command line of the child; its presence makes the
// test binary run main instead of the tests.
const argsEnv = "DISTOPT_MAINTEST_ARGS"

// Main is the body of a TestMain: in a child started by Run it runs main
// with the arguments Run was given (as program name), then exits 0;
// otherwise it runs the tests.
func Main(m *testing.M, name string, main func()) {
	if args, ok := os.LookupEnv(argsEnv); ok {
		os.Args = append([]string{name}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Run runs main (see Main) with args, split at spaces, and env added to
// the environment, and returns its exit status, stdout and stderr.
func Run(t testing.TB, args string, env ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), argsEnv+"="+args), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running %s: %v", os.Args[0], err)
	}
	return code, out.String(), errOut.String()
}

// OneLine reports whether s is exactly one line (a trailing newline
// allowed) that starts with prefix.
func OneLine(s, prefix string) bool {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return len(lines) == 1 && strings.HasPrefix(lines[0], prefix)
}

// CheckHelp checks that -help, -h and --help print the usage to stdout
// with status 0, and that an unknown flag is an error on stderr with
// status 2.
func CheckHelp(t *testing.T, env ...string) {
	t.Helper()
	for _, arg := range []string{"-help", "-h", "--help"} {
		code, stdout, stderr := Run(t, arg, env...)
		if code != 0 || !strings.Contains(stdout, "Usage") || stderr != "" {
			t.Errorf("%s: status %d, stdout %q, stderr %q; want 0, the usage, nothing", arg, code, stdout, stderr)
		}
	}
	code, stdout, stderr := Run(t, "-no-such-flag", env...)
	if code != 2 || stdout != "" || !strings.Contains(stderr, "no-such-flag") {
		t.Errorf("-no-such-flag: status %d, stdout %q, stderr %q; want 2, nothing, the error", code, stdout, stderr)
	}
}
