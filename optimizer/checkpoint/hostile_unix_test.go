//go:build unix

package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// replaceWithFIFO replaces path with a named pipe nobody writes.
func replaceWithFIFO(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
}

// replaceWithLink replaces path with a symbolic link to target.
func replaceWithLink(t *testing.T, path, target string) {
	t.Helper()
	os.RemoveAll(path)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// unblocked runs fn and fails the test if it has not returned after a
// minute: a read that waits for a pipe's writer never returns, and a
// minute is far beyond the milliseconds a Verify of this size takes, so
// the guard does not depend on the machine's speed.
func unblocked(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s blocked", what)
		return nil
	}
}

// TestHostileFiles puts what is not a checkpoint file where one belongs:
// a named pipe, a directory, a device, a symbolic link loop or a link to
// nothing, and a latest naming a removed step. Verify and Load return at
// once with the sentinel and a message that names the problem. Before,
// a named pipe blocked both forever, a link loop in latest was reported
// as "holds neither index.json nor latest", and a latest naming a removed
// step as "a save that did not finish".
func TestHostileFiles(t *testing.T) {
	params, cfg := testParams(), testConfigs()["E4M3 current"]
	orig := t.TempDir()
	src := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	src.train(0, 2)
	src.save(orig, SaveOptions{ChunkBytes: 256})
	step := stepDirName(2)
	cases := []struct {
		name   string
		damage func(t *testing.T, root string)
		want   error
		says   string
	}{
		{"shard is a named pipe", func(t *testing.T, root string) {
			replaceWithFIFO(t, filepath.Join(root, step, shardName(1, 2)))
		}, ErrCorrupt, "is a named pipe, not a regular file"},
		{"index is a named pipe", func(t *testing.T, root string) {
			replaceWithFIFO(t, filepath.Join(root, step, indexName))
		}, ErrCorrupt, "is a named pipe, not a regular file"},
		{"latest is a named pipe", func(t *testing.T, root string) {
			replaceWithFIFO(t, filepath.Join(root, latestName))
		}, ErrCorrupt, "is a named pipe, not a regular file"},
		{"index is a directory", func(t *testing.T, root string) {
			p := filepath.Join(root, step, indexName)
			os.Remove(p)
			os.Mkdir(p, 0o755)
		}, ErrCorrupt, "is a directory, not a regular file"},
		{"index links to /dev/zero", func(t *testing.T, root string) {
			replaceWithLink(t, filepath.Join(root, step, indexName), "/dev/zero")
		}, ErrCorrupt, "is a device, not a regular file"},
		{"shard links to /dev/zero", func(t *testing.T, root string) {
			replaceWithLink(t, filepath.Join(root, step, shardName(0, 2)), "/dev/zero")
		}, ErrCorrupt, "is a device, not a regular file"},
		{"latest is a link loop", func(t *testing.T, root string) {
			replaceWithLink(t, filepath.Join(root, latestName), latestName)
		}, ErrCorrupt, "latest is a symbolic link loop"},
		{"index is a link loop", func(t *testing.T, root string) {
			replaceWithLink(t, filepath.Join(root, step, indexName), indexName)
		}, ErrCorrupt, "index.json is a symbolic link loop"},
		{"latest links to nothing", func(t *testing.T, root string) {
			replaceWithLink(t, filepath.Join(root, latestName), "gone")
		}, ErrCorrupt, "latest is a symbolic link to nothing"},
		{"latest names a removed step", func(t *testing.T, root string) {
			os.RemoveAll(filepath.Join(root, step))
		}, ErrIncomplete, "latest names " + step + ", which does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			copyDir(t, orig, root)
			c.damage(t, root)
			verr := unblocked(t, "Verify", func() error { _, err := Verify(root); return err })
			dst := newCluster(t, 1, params, cfg, optimizer.FromMap(weights(params, 9)))
			lerr := unblocked(t, "Load", func() error { return dst.load(root, LoadOptions{})[0] })
			for what, err := range map[string]error{"Verify": verr, "Load": lerr} {
				if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
					t.Errorf("%s: %v\nwant %v saying %q", what, err, c.want, c.says)
				}
				for _, wrong := range []string{"did not finish", "holds neither"} {
					if err != nil && strings.Contains(err.Error(), wrong) {
						t.Errorf("%s blames %q: %v", what, wrong, err)
					}
				}
			}
		})
	}
}

// TestLatestNeverBackwards damages latest while step 4 is complete under
// the root, then saves step 2 from a fresh run: the save fails with
// ErrRewind and writes no step 2, and a save of step 5 from the first run
// succeeds and points latest at it. Before, the save of step 2 succeeded
// and latest named step 2. A save with Rewind still moves latest back.
func TestLatestNeverBackwards(t *testing.T) {
	params, cfg := testParams(), testConfigs()["E4M3 current"]
	orig := t.TempDir()
	old := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	old.train(0, 4)
	old.save(orig, SaveOptions{})
	old.train(4, 1)
	fresh := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 5)))
	fresh.train(0, 2)
	latest := func(root string) string { return filepath.Join(root, latestName) }
	cases := []struct {
		name   string
		damage func(t *testing.T, root string)
	}{
		{"garbage", func(t *testing.T, root string) { os.WriteFile(latest(root), []byte("\x00garbage"), 0o644) }},
		{"deleted", func(t *testing.T, root string) { os.Remove(latest(root)) }},
		{"link loop", func(t *testing.T, root string) { replaceWithLink(t, latest(root), latestName) }},
		{"named pipe", func(t *testing.T, root string) { replaceWithFIFO(t, latest(root)) }},
		{"names a removed step", func(t *testing.T, root string) {
			os.WriteFile(latest(root), []byte(stepDirName(7)+"\n"), 0o644)
		}},
		{"a staging name", func(t *testing.T, root string) {
			os.WriteFile(latest(root), []byte(stepDirName(4)+stagingSuffix+"\n"), 0o644)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			copyDir(t, orig, root)
			c.damage(t, root)
			for r, err := range fresh.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
				ctx, cancel := testCtx()
				defer cancel()
				_, err := Save(ctx, o, comm, root, SaveOptions{})
				return err
			}) {
				if !errors.Is(err, ErrRewind) || !strings.Contains(err.Error(), "complete checkpoint of step 4") {
					t.Fatalf("rank %d: save of step 2: %v, want ErrRewind naming step 4", r, err)
				}
			}
			if present(filepath.Join(root, stepDirName(2))) {
				t.Fatal("the refused save left step 2")
			}
			old.save(root, SaveOptions{})
			if got, err := Latest(root); err != nil || filepath.Base(got) != stepDirName(5) {
				t.Fatalf("after saving step 5: latest %q, %v", got, err)
			}
			fresh.save(root, SaveOptions{Rewind: true})
			if got, err := Latest(root); err != nil || filepath.Base(got) != stepDirName(2) {
				t.Fatalf("after a rewind to step 2: latest %q, %v", got, err)
			}
		})
	}
}
