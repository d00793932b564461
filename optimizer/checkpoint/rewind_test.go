package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// stepsIn lists the steps of the complete checkpoints under root.
func stepsIn(t *testing.T, root string) []int {
	t.Helper()
	dirs, err := stepDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, d := range dirs {
		if !d.staging {
			steps = append(steps, d.step)
		}
	}
	slices.Sort(steps)
	return steps
}

// TestFreshRunInOldRoot: a fresh run saving into the root of an older run
// that reached a higher step. Before, latest silently moved back and the
// next prune removed the new run's checkpoint and kept the old run's.
// Now the save fails with ErrRewind unless SaveOptions.Rewind is set, and
// pruning keeps the current run's checkpoints first.
func TestFreshRunInOldRoot(t *testing.T) {
	params, cfg := testParams(), testConfigs()["E4M3 current"]
	root := t.TempDir()
	old := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	old.train(0, 2)
	old.save(root, SaveOptions{})
	old.train(2, 2)
	old.save(root, SaveOptions{})

	fresh := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 5)))
	fresh.train(0, 1)
	for r, err := range fresh.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		_, err := Save(context.Background(), o, comm, root, SaveOptions{Keep: 2})
		return err
	}) {
		if !errors.Is(err, ErrRewind) {
			t.Fatalf("rank %d: save below latest: %v, want ErrRewind", r, err)
		}
	}
	if latest, _ := Latest(root); filepath.Base(latest) != stepDirName(4) || !slices.Equal(stepsIn(t, root), []int{2, 4}) {
		t.Fatalf("after a refused save: latest %s, steps %v", latest, stepsIn(t, root))
	}

	fresh.save(root, SaveOptions{Keep: 2, Rewind: true})
	fresh.train(1, 1)
	fresh.save(root, SaveOptions{Keep: 2})
	latest, err := Latest(root)
	if err != nil || filepath.Base(latest) != stepDirName(2) || !slices.Equal(stepsIn(t, root), []int{1, 2}) {
		t.Fatalf("latest %s (%v), steps %v; want the fresh run's steps 1 and 2", latest, err, stepsIn(t, root))
	}
	// Step 2 is the fresh run's: loading it reproduces the fresh run.
	want := fresh.snapshot()
	dst := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 9)))
	dst.must(dst.load(root, LoadOptions{}))
	if d := diffState(want, dst.snapshot()); d != "" {
		t.Fatalf("step 2 is not the fresh run's: %s", d)
	}
	if _, err := os.Stat(filepath.Join(root, stepDirName(4))); err == nil {
		t.Fatal("the old run's step 4 survived past Keep")
	}
}
