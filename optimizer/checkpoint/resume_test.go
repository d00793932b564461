package checkpoint

import (
	"fmt"
	"testing"

	"github.com/distopt/distopt/optimizer"
)

// TestResume saves at d in {1, 2, 4}, loads at d in {1, 2, 3, 4, 8} and
// continues: the state right after the load equals the state saved, and
// the state after more steps equals that of an uninterrupted run, bit for
// bit (masters, moments, FP8 bytes and scales, high-precision copies,
// step, loss scale, amax histories), for several recipes, AdamW and SGD.
func TestResume(t *testing.T) {
	const before, after = 3, 3
	saves, loads := []int{1, 2, 4}, []int{1, 2, 3, 4, 8}
	if testing.Short() {
		saves, loads = []int{1, 4}, []int{3, 8}
	}
	params := testParams()
	for name, cfg := range testConfigs() {
		t.Run(name, func(t *testing.T) {
			ref := newCluster(t, 1, params, cfg, optimizer.FromMap(weights(params, 1)))
			ref.train(0, before+after)
			want := ref.snapshot()
			for _, ds := range saves {
				root := t.TempDir()
				src := newCluster(t, ds, params, cfg, optimizer.FromMap(weights(params, 1)))
				src.train(0, before)
				saved := src.snapshot()
				info := src.save(root, SaveOptions{ChunkBytes: 4096})
				if info.Step != src.opts[0].StepCount() || info.World != ds {
					t.Fatalf("saved %+v", info)
				}
				for _, dl := range loads {
					t.Run(fmt.Sprintf("%d to %d", ds, dl), func(t *testing.T) {
						dst := newCluster(t, dl, params, cfg, optimizer.FromMap(weights(params, 99)))
						dst.must(dst.load(root, LoadOptions{}))
						if d := diffState(saved, dst.snapshot()); d != "" {
							t.Fatalf("state after the load differs from the state saved: %s", d)
						}
						dst.train(before, after)
						if d := diffState(want, dst.snapshot()); d != "" {
							t.Fatalf("continued run differs from the uninterrupted one: %s", d)
						}
					})
				}
			}
		})
	}
}

// TestEmptyShards saves a model so small that most of 8 ranks own no piece
// (their files hold no tensor) and loads it at 2 and back at 8.
func TestEmptyShards(t *testing.T) {
	params := []optimizer.Param{{Name: "a", Shape: []int{3}}, {Name: "b", Shape: []int{2}, HighPrecision: true}}
	cfg := testConfigs()["E4M3 delayed"]
	src := newCluster(t, 8, params, cfg, optimizer.FromMap(weights(params, 1)))
	src.train(0, 2)
	saved := src.snapshot()
	root := t.TempDir()
	src.save(root, SaveOptions{})
	if _, err := Verify(root); err != nil {
		t.Fatal(err)
	}
	for _, d := range []int{2, 8} {
		dst := newCluster(t, d, params, cfg, optimizer.FromMap(weights(params, 2)))
		dst.must(dst.load(root, LoadOptions{}))
		if diff := diffState(saved, dst.snapshot()); diff != "" {
			t.Fatalf("d=%d: %s", d, diff)
		}
	}
}
