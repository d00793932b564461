package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

var errInjected = errors.New("injected failure")

// crashPoints are the stages of a save, each with a rank that passes it.
var crashPoints = []struct {
	st   stage
	rank int
}{
	{stagePrepare, 0},
	{stageShardWrite, 1},
	{stageShardHalf, 0},
	{stageShardHalf, 2},
	{stageShardRename, 2},
	{stageStateWrite, 1},
	{stageStateRename, 2},
	{stageIndexWrite, 0},
	{stageIndexRename, 0},
	{stageDirRename, 0},
	{stageLatestWrite, 0},
	{stageLatestRename, 0},
}

const crashWorld = 3

// crashRun trains crashWorld ranks 2 steps, saves under root, trains one
// more step, and returns the cluster with the states at both saves.
func crashRun(t *testing.T, root string) (c *cluster, first, second state) {
	t.Helper()
	params, cfg := testParams(), testConfigs()["E4M3 delayed"]
	c = newCluster(t, crashWorld, params, cfg, optimizer.FromMap(weights(params, 1)))
	c.train(0, 2)
	first = c.snapshot()
	c.save(root, SaveOptions{ChunkBytes: 512})
	c.train(2, 1)
	return c, first, c.snapshot()
}

// checkAfterCrash checks what an interrupted second save left under root:
// latest still names the first checkpoint, which loads and verifies; the
// second either loads complete or is refused with ErrIncomplete; and a new
// save of the second state succeeds and becomes the latest.
func checkAfterCrash(t *testing.T, root string, c *cluster, first, second state) {
	t.Helper()
	params, cfg := testParams(), testConfigs()["E4M3 delayed"]
	if _, err := Verify(root); err != nil {
		t.Fatalf("Verify of the previous checkpoint: %v", err)
	}
	fresh := func(d int) *cluster { return newCluster(t, d, params, cfg, optimizer.FromMap(weights(params, 5))) }
	l := fresh(2)
	l.must(l.load(root, LoadOptions{}))
	if d := diffState(first, l.snapshot()); d != "" {
		t.Fatalf("previous checkpoint after the crash: %s", d)
	}
	dir := filepath.Join(root, stepDirName(3))
	if _, err := os.Stat(dir); err == nil {
		l := fresh(1)
		l.must(l.load(dir, LoadOptions{}))
		if d := diffState(second, l.snapshot()); d != "" {
			t.Fatalf("new checkpoint after the crash: %s", d)
		}
	} else if _, err := os.Stat(dir + stagingSuffix); err == nil {
		l := fresh(1)
		for r, err := range l.load(dir+stagingSuffix, LoadOptions{}) {
			if !errors.Is(err, ErrIncomplete) {
				t.Fatalf("rank %d: loading the staging directory: %v, want ErrIncomplete", r, err)
			}
		}
	}
	c.save(root, SaveOptions{})
	l = fresh(4)
	l.must(l.load(root, LoadOptions{}))
	if d := diffState(second, l.snapshot()); d != "" {
		t.Fatalf("checkpoint saved after the crash: %s", d)
	}
	if got, _ := Latest(root); got != dir {
		t.Fatalf("latest is %s, want %s", got, dir)
	}
}

// TestSaveInterrupted fails a save at every stage on one rank: every rank
// returns an error (the failing one its own), and what is left behaves as
// checkAfterCrash demands.
func TestSaveInterrupted(t *testing.T) {
	for _, cp := range crashPoints {
		t.Run(string(cp.st)+" rank "+string(rune('0'+cp.rank)), func(t *testing.T) {
			root := t.TempDir()
			c, first, second := crashRun(t, root)
			testHook = func(st stage, rank int) error {
				if st == cp.st && rank == cp.rank {
					return errInjected
				}
				return nil
			}
			errs := c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
				ctx, cancel := testCtx()
				defer cancel()
				_, err := Save(ctx, o, comm, root, SaveOptions{ChunkBytes: 512, RankState: []byte{byte(r)}})
				return err
			})
			testHook = nil
			for r, err := range errs {
				switch {
				case r == cp.rank && !errors.Is(err, errInjected):
					t.Fatalf("failing rank %d: %v, want the injected error", r, err)
				case r != cp.rank && !errors.Is(err, ErrRemote):
					t.Fatalf("rank %d: %v, want ErrRemote", r, err)
				}
			}
			checkAfterCrash(t, root, c, first, second)
		})
	}
}
