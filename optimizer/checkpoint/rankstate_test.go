package checkpoint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// saveStates saves c with each rank's RankState states[r] and returns the
// errors by rank.
func saveStates(c *cluster, root string, states [][]byte) []error {
	return c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		_, err := Save(ctx, o, comm, root, SaveOptions{RankState: states[r]})
		return err
	})
}

// loadStates loads path into c and returns every rank's Info.RankState.
func loadStates(c *cluster, path string) ([][]byte, []error) {
	out := make([][]byte, len(c.opts))
	errs := c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		info, err := Load(ctx, o, comm, path, LoadOptions{})
		out[r] = info.RankState
		return err
	})
	return out, errs
}

// TestRankState checks SaveOptions.RankState: each rank gets back by Load
// the bytes it saved (ranks differ in them, one saves an empty state), at
// the world size saved; at another world size, and from a checkpoint saved
// without states or by a rank that gave none, Load returns none. A flipped
// byte fails the load with ErrChecksum (and Verify too), a file that is no
// state file or a directory in its place with ErrCorrupt, a missing file
// with ErrMissingFile, each before the optimizer is touched; a save
// failing as it writes or renames a state file leaves latest where it
// was (TestSaveInterrupted and TestSaveKilled cover those stages too).
func TestRankState(t *testing.T) {
	cfg := testConfigs()["E4M3 current"]
	params := testParams()
	init := optimizer.FromMap(weights(params, 1))
	c := newCluster(t, 2, params, cfg, init)
	c.train(0, 2)
	root := t.TempDir()
	states := [][]byte{[]byte("rank 0: amax histories"), {}}
	c.must(saveStates(c, root, states))
	dir, err := Latest(root)
	if err != nil {
		t.Fatal(err)
	}

	d2 := newCluster(t, 2, params, cfg, init)
	got, errs := loadStates(d2, root)
	d2.must(errs)
	for r := range states {
		if !bytes.Equal(got[r], states[r]) || got[r] == nil {
			t.Errorf("rank %d: state %q, saved %q", r, got[r], states[r])
		}
	}
	d3 := newCluster(t, 3, params, cfg, init)
	got, errs = loadStates(d3, root)
	d3.must(errs)
	for r, s := range got {
		if s != nil {
			t.Errorf("3 ranks: rank %d got state %q of a 2-rank save", r, s)
		}
	}

	path := filepath.Join(dir, rankStateName(0, 2))
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte) func() error { return func() error { return os.WriteFile(path, b, 0o644) } }
	flipped := bytes.Clone(orig)
	flipped[len(flipped)-1] ^= 1
	for _, c := range []struct {
		name  string
		apply func() error
		want  error
	}{
		{"flipped byte", write(flipped), ErrChecksum},
		{"not a state file", write([]byte("DORSTAT")), ErrCorrupt},
		{"missing", func() error { return os.Remove(path) }, ErrMissingFile},
		{"a directory", func() error { return errors.Join(os.Remove(path), os.Mkdir(path, 0o755)) }, ErrCorrupt},
	} {
		if err := c.apply(); err != nil {
			t.Fatal(err)
		}
		before := d2.snapshot()
		_, errs := loadStates(d2, root)
		if !errors.Is(errs[0], c.want) || errs[1] == nil {
			t.Errorf("%s: errors %v, want %v on rank 0 and an error on rank 1", c.name, errs, c.want)
		}
		if d := diffState(before, d2.snapshot()); d != "" {
			t.Errorf("%s: the failed load changed the state: %s", c.name, d)
		}
		if _, err := Verify(root); !errors.Is(err, c.want) {
			t.Errorf("%s: Verify: %v, want %v", c.name, err, c.want)
		}
		if err := errors.Join(os.RemoveAll(path), os.WriteFile(path, orig, 0o644)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Verify(root); err != nil {
		t.Errorf("Verify of the intact checkpoint: %v", err)
	}

	c.train(2, 1)
	for _, st := range []stage{stageStateWrite, stageStateRename} {
		testHook = func(s stage, rank int) error {
			if s == st && rank == 1 {
				return errInjected
			}
			return nil
		}
		errs := saveStates(c, root, [][]byte{[]byte("a"), []byte("b")})
		testHook = nil
		if !errors.Is(errs[1], errInjected) || errs[0] == nil {
			t.Errorf("failing at %s: errors %v", st, errs)
		}
		if got, _ := Latest(root); got != dir {
			t.Errorf("failing at %s: latest is %s, want %s", st, got, dir)
		}
	}

	plain := t.TempDir()
	c.must(c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
		ctx, cancel := testCtx()
		defer cancel()
		_, err := Save(ctx, o, comm, plain, SaveOptions{})
		return err
	}))
	got, errs = loadStates(d2, plain)
	d2.must(errs)
	if got[0] != nil || got[1] != nil {
		t.Errorf("a checkpoint saved without states gave %q", got)
	}
}
