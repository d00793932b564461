package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer"
)

// TestVerifyChecksRecords edits what Load reads of a re-hashed index
// beyond the layout: the amax histories and cast scales of delayed
// scaling, and the update rule. Verify and Load both refuse each edit
// with ErrCorrupt. Before, Verify passed all of them, and Load refused
// them with "holds no amax history" or ErrRule.
func TestVerifyChecksRecords(t *testing.T) {
	params, cfg := testParams(), testConfigs()["E4M3 delayed"]
	orig := t.TempDir()
	src := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	src.train(0, 2)
	src.save(orig, SaveOptions{ChunkBytes: 256})
	fp8Name := ""
	for _, p := range params {
		if !p.HighPrecision {
			fp8Name = p.Name
		}
	}
	cases := []struct {
		name string
		edit func(idx *index)
	}{
		{"amax history removed", func(idx *index) { delete(idx.Scalars.AmaxHistory, fp8Name) }},
		{"amax history entry removed", func(idx *index) {
			h := idx.Scalars.AmaxHistory[fp8Name]
			idx.Scalars.AmaxHistory[fp8Name] = h[1:]
		}},
		{"amax history entry added", func(idx *index) {
			idx.Scalars.AmaxHistory[fp8Name] = append(idx.Scalars.AmaxHistory[fp8Name], 0)
		}},
		{"cast scale removed", func(idx *index) { delete(idx.Scalars.CastScale, fp8Name) }},
		{"unknown rule", func(idx *index) { idx.Config.Rule = "lion" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkRehashed(t, orig, params, cfg, c.edit) })
	}
}

// TestSaveChunkBytes: a ChunkBytes that is not a multiple of 8 from 8 to
// MaxChunkBytes fails Save on every rank with ErrOptions, naming the field
// and the limit, and writes nothing; the bounds themselves save and
// verify. Before, 12 and -8 panicked.
func TestSaveChunkBytes(t *testing.T) {
	params, cfg := testParams(), testConfigs()["E4M3 current"]
	c := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	c.train(0, 1)
	cases := []struct {
		chunk int
		ok    bool
	}{
		{12, false}, {-8, false}, {4, false}, {MaxChunkBytes + 8, false}, {-1 << 62, false},
		{8, true}, {MaxChunkBytes, true}, {0, true},
	}
	for _, k := range cases {
		root := t.TempDir()
		errs := c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
			ctx, cancel := testCtx()
			defer cancel()
			_, err := Save(ctx, o, comm, root, SaveOptions{ChunkBytes: k.chunk})
			return err
		})
		if k.ok {
			c.must(errs)
			if _, err := Verify(root); err != nil {
				t.Fatalf("ChunkBytes %d: Verify: %v", k.chunk, err)
			}
			continue
		}
		for r, err := range errs {
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "SaveOptions.ChunkBytes") || !strings.Contains(err.Error(), "MaxChunkBytes") {
				t.Fatalf("ChunkBytes %d, rank %d: %v, want ErrOptions naming the field and MaxChunkBytes", k.chunk, r, err)
			}
		}
		if dirs, _ := stepDirs(root); len(dirs) != 0 {
			t.Fatalf("ChunkBytes %d: the refused save left %v", k.chunk, dirs)
		}
	}
}
