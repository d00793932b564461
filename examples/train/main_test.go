package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLongRunUnderLauncher runs the README's multi-process example on a
// shortened clock: every deadline is 4 s and the run, slowed by 250 ms per
// step, lasts more than twice as long, as a 30-minute run outlasts the
// default deadlines. Before, the example bounded the whole run (5 minutes
// in-process) and ended it with a barrier under the 60 s deadline of its
// rendezvous, so that any run longer than that failed.
func TestLongRunUnderLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the launcher and two ranks for 10 s")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binaries")
	}
	bin := t.TempDir()
	build := exec.Command(goTool, "build", "-o", bin+string(filepath.Separator), "../../cmd/distopt", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const deadline, steps, delay = 4 * time.Second, 40, 250 * time.Millisecond
	cmd := exec.Command(filepath.Join(bin, "distopt"), "run", "--nproc-per-node", "2", "--",
		filepath.Join(bin, "train"), "-steps", "40", "-step-delay", delay.String(),
		"-step-timeout", deadline.String(), "-setup-timeout", deadline.String())
	cmd.Env = os.Environ()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil || !strings.Contains(string(out), "final loss") {
		t.Fatalf("after %v: %v\n%s", took, err, out)
	}
	if took < steps*delay || steps*delay < 2*deadline {
		t.Fatalf("the run took %v: not longer than twice the %v deadlines, the test shows nothing", took, deadline)
	}
	t.Logf("a run of %v with deadlines of %v succeeded", took.Round(time.Millisecond), deadline)
}
