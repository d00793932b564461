//go:build unix

package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

const killEnv = "DISTOPT_CHECKPOINT_KILL"

// TestSaveKilled re-runs the test binary as a child that loads the first
// checkpoint, takes a step and saves, and is killed with SIGKILL at one
// stage of the save; then checks what it left (see checkAfterCrash).
func TestSaveKilled(t *testing.T) {
	if os.Getenv(killEnv) != "" {
		t.Skip("in the child")
	}
	points := crashPoints
	if testing.Short() {
		points = points[2:4]
	}
	for _, cp := range points {
		t.Run(fmt.Sprintf("%s rank %d", cp.st, cp.rank), func(t *testing.T) {
			root := t.TempDir()
			c, first, second := crashRun(t, root)
			cmd := exec.Command(os.Args[0], "-test.run=^TestKilledChild$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%s", killEnv, cp.st, cp.rank, root))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("child ended with %v, want SIGKILL; output:\n%s", err, out)
			}
			if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v, want SIGKILL; output:\n%s", err, out)
			}
			checkAfterCrash(t, root, c, first, second)
		})
	}
}

// TestKilledChild is the child of TestSaveKilled; it does nothing unless
// the environment names a stage, a rank and a root.
func TestKilledChild(t *testing.T) {
	spec := os.Getenv(killEnv)
	if spec == "" {
		t.Skip("runs only as the child of TestSaveKilled")
	}
	parts := strings.SplitN(spec, ",", 3)
	if len(parts) != 3 {
		t.Fatalf("bad %s %q", killEnv, spec)
	}
	st, root := parts[0], parts[2]
	rank, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatalf("bad %s %q: %v", killEnv, spec, err)
	}
	params, cfg := testParams(), testConfigs()["E4M3 delayed"]
	c := newCluster(t, crashWorld, params, cfg, optimizer.FromMap(weights(params, 7)))
	c.must(c.load(root, LoadOptions{}))
	c.train(2, 1)
	testHook = func(s stage, r int) error {
		if string(s) == st && r == rank {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal ends the process
		}
		return nil
	}
	c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		_, err := Save(ctx, o, comm, root, SaveOptions{ChunkBytes: 512, RankState: []byte{byte(r)}})
		return err
	})
	t.Fatal("the save finished: the stage was never reached")
}
