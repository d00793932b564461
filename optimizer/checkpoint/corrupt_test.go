package checkpoint

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/safetensors"
)

// copyDir copies the regular files of src (one level deep) to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// flip inverts one byte of a file, at off from its start (negative: from
// its end).
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(b))
	}
	b[off] ^= 0x5a
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func dataOffset(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	h, _, err := safetensors.Read(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return h.DataOffset
}

func editFile(t *testing.T, path string, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadDamaged damages a checkpoint in one way per case and loads it at
// another world size: every rank fails with the case's sentinel, and the
// optimizers are left as they were, usable.
func TestLoadDamaged(t *testing.T) {
	params, cfg := testParams(), testConfigs()["E4M3 current"]
	orig := t.TempDir()
	src := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	src.train(0, 2)
	src.save(orig, SaveOptions{ChunkBytes: 256})
	step := stepDirName(2)
	shard0, shard1 := filepath.Join(step, shardName(0, 2)), filepath.Join(step, shardName(1, 2))
	index := filepath.Join(step, indexName)
	cases := []struct {
		name   string
		damage func(t *testing.T, root string)
		want   error
	}{
		{"data byte flipped", func(t *testing.T, root string) {
			p := filepath.Join(root, shard1)
			flip(t, p, dataOffset(t, p)+3000)
		}, ErrChecksum},
		{"last byte flipped", func(t *testing.T, root string) { flip(t, filepath.Join(root, shard0), -1) }, ErrChecksum},
		{"header byte flipped", func(t *testing.T, root string) { flip(t, filepath.Join(root, shard0), 40) }, ErrChecksum},
		{"length prefix flipped", func(t *testing.T, root string) { flip(t, filepath.Join(root, shard1), 1) }, ErrChecksum},
		{"truncated", func(t *testing.T, root string) {
			p := filepath.Join(root, shard1)
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-3); err != nil {
				t.Fatal(err)
			}
		}, ErrTruncated},
		{"file missing", func(t *testing.T, root string) { os.Remove(filepath.Join(root, shard0)) }, ErrMissingFile},
		{"index body edited", func(t *testing.T, root string) {
			editFile(t, filepath.Join(root, index), `"step": 2`, `"step": 3`)
		}, ErrChecksum},
		{"index garbled", func(t *testing.T, root string) { os.WriteFile(filepath.Join(root, index), []byte("{"), 0o644) }, ErrCorrupt},
		{"index missing", func(t *testing.T, root string) { os.Remove(filepath.Join(root, index)) }, ErrIncomplete},
		{"newer version", func(t *testing.T, root string) {
			editFile(t, filepath.Join(root, index), `"version": 1`, `"version": 2`)
		}, ErrVersion},
		{"latest garbled", func(t *testing.T, root string) { os.WriteFile(filepath.Join(root, latestName), []byte("../x"), 0o644) }, ErrCorrupt},
		{"no checkpoint", func(t *testing.T, root string) { os.Remove(filepath.Join(root, latestName)) }, ErrNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			copyDir(t, orig, root)
			c.damage(t, root)
			dst := newCluster(t, 3, params, cfg, optimizer.FromMap(weights(params, 9)))
			before := dst.snapshot()
			for r, err := range dst.load(root, LoadOptions{}) {
				if !errors.Is(err, c.want) {
					t.Fatalf("rank %d: %v, want %v", r, err, c.want)
				}
			}
			if d := diffState(before, dst.snapshot()); d != "" {
				t.Fatalf("a failed load changed the optimizer: %s", d)
			}
			dst.train(0, 1) // still usable
		})
	}
	t.Run("not found is fs.ErrNotExist", func(t *testing.T) {
		dst := newCluster(t, 1, params, cfg, optimizer.FromMap(weights(params, 9)))
		if err := dst.load(t.TempDir(), LoadOptions{})[0]; !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrNotFound) {
			t.Fatalf("%v, want ErrNotFound and fs.ErrNotExist", err)
		}
	})
}

// TestVerify checks every byte: it passes an intact checkpoint and fails
// one whose data, or only the chunk checksums in a header, changed.
func TestVerify(t *testing.T) {
	params, cfg := testParams(), testConfigs()["sgd bf16 momentum"]
	root := t.TempDir()
	src := newCluster(t, 3, params, cfg, optimizer.FromMap(weights(params, 1)))
	src.train(0, 1)
	src.save(root, SaveOptions{ChunkBytes: 1024})
	info, err := Verify(root)
	if err != nil || info.Step != 1 || info.World != 3 {
		t.Fatalf("Verify = %+v, %v", info, err)
	}
	p := filepath.Join(root, stepDirName(1), shardName(2, 3))
	flip(t, p, dataOffset(t, p)+10)
	if _, err := Verify(root); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Verify of a flipped byte: %v, want ErrChecksum", err)
	}
}
