package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/distopt/distopt/optimizer"
)

// rehash rewrites the index of dir after edit changed its body, with a
// correct body checksum: a hand edit that knows the format.
func rehash(t *testing.T, dir string, edit func(idx *index)) {
	t.Helper()
	path := filepath.Join(dir, indexName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f indexFile
	idx := new(index)
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(f.Body, idx); err != nil {
		t.Fatal(err)
	}
	edit(idx)
	data, err := encodeIndex(idx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyChecksWhatLoadChecks: an index edited by hand and re-hashed
// (a shape, a name, a step) fails Verify and Load alike, with ErrCorrupt.
// Before, Verify passed the shape and name edits that Load then refused,
// and both accepted a re-hashed step.
func TestVerifyChecksWhatLoadChecks(t *testing.T) {
	params, cfg := testParams(), testConfigs()["E4M3 current"]
	orig := t.TempDir()
	src := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	src.train(0, 2)
	src.save(orig, SaveOptions{ChunkBytes: 256})
	if _, err := Verify(orig); err != nil {
		t.Fatal(err)
	}
	big := -1
	for i, p := range params {
		if len(p.Shape) == 2 && p.Shape[0] != p.Shape[1] {
			big = i
		}
	}
	cases := []struct {
		name string
		edit func(idx *index)
	}{
		{"shape transposed", func(idx *index) {
			s := idx.Params[big].Shape
			s[0], s[1] = s[1], s[0]
		}},
		{"name changed", func(idx *index) { idx.Params[0].Name += "x" }},
		{"names swapped", func(idx *index) { idx.Params[0].Name, idx.Params[1].Name = idx.Params[1].Name, idx.Params[0].Name }},
		{"step", func(idx *index) { idx.Step = 3 }},
		{"step and scalar step", func(idx *index) { idx.Step, idx.Scalars.Step = 3, 3 }},
		{"bucket size", func(idx *index) { idx.Layout.BucketElements *= 2 }},
		{"piece moved to another rank", func(idx *index) {
			for i := range idx.Params {
				for k := range idx.Params[i].Pieces {
					idx.Params[i].Pieces[k].Rank = 1 - idx.Params[i].Pieces[k].Rank
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkRehashed(t, orig, params, cfg, c.edit) })
	}
}

// checkRehashed copies the checkpoint of step 2 under orig, edits and
// re-hashes its index, and checks that Verify and Load (on two ranks of
// params and cfg) both refuse it with ErrCorrupt.
func checkRehashed(t *testing.T, orig string, params []optimizer.Param, cfg optimizer.Config, edit func(idx *index)) {
	t.Helper()
	root := t.TempDir()
	copyDir(t, orig, root)
	rehash(t, filepath.Join(root, stepDirName(2)), edit)
	_, verr := Verify(root)
	dst := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 9)))
	lerr := dst.load(root, LoadOptions{})[0]
	if !errors.Is(verr, ErrCorrupt) || !errors.Is(lerr, ErrCorrupt) {
		t.Fatalf("Verify: %v\nLoad: %v\nwant ErrCorrupt from both", verr, lerr)
	}
}
