package checkpoint

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
)

// TestDelayedCastScale (a guard of optimizer.Scalars' CastScales) resumes delayed scaling whose held bytes were cast
// with a scale s for which 1/(1/s) != s in float32, with weights whose
// E4M3 bytes differ between s and 1/(1/s): the reload must recast with s
// itself (not a reciprocal of scale_inv) for the bytes to survive, and the
// checkpoint records s.
func TestDelayedCastScale(t *testing.T) {
	var amax, s, s2 float32
	for a := float32(0.05); ; a = math.Nextafter32(a, 1) {
		s, _ = fp8.ScaleFromAmax(a, fp8.E4M3, 0, false)
		if 1/(1/s) != s {
			amax, s2 = a, 1/(1/s)
			break
		}
	}
	w := []float32{amax}
	for k := 1; len(w) < 64 && k < 1<<20; k++ {
		x := float32(k) * amax / (1 << 20)
		if fp8.E4M3.Encode(x*s) != fp8.E4M3.Encode(x*s2) {
			w = append(w, x)
		}
	}
	if len(w) < 2 {
		t.Fatalf("no weight casts differently under %g and %g", s, s2)
	}
	params := []optimizer.Param{{Name: "w", Shape: []int{len(w)}}}
	cfg := optimizer.Config{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 2}}
	src := newCluster(t, 2, params, cfg, optimizer.FromMap(map[string][]float32{"w": w}))
	saved := src.snapshot()
	if got := saved.scalars.CastScales[0]; got != s {
		t.Logf("optimizer.Scalars reports cast scale %g for a cast with %g; Save recovers the exact one", got, s)
	}
	root := t.TempDir()
	src.save(root, SaveOptions{})
	dst := newCluster(t, 3, params, cfg, optimizer.FromMap(map[string][]float32{"w": make([]float32, len(w))}))
	dst.must(dst.load(root, LoadOptions{}))
	if d := diffState(saved, dst.snapshot()); d != "" {
		t.Fatalf("state after the load differs from the state saved: %s", d)
	}
	idx, _, err := readIndex(filepath.Join(root, stepDirName(0)))
	if err != nil {
		t.Fatal(err)
	}
	if got := math.Float32frombits(idx.Scalars.CastScale["w"]); got != s {
		t.Fatalf("checkpoint records cast scale %g, want %g", got, s)
	}
}

// TestDelayedCastScaleAfterSteps saves delayed scaling after two steps, for
// the two seeds (of 30 tried) whose resume failed while Save recorded the
// optimizer's 1/scale_inv as the cast scale; each must resume exactly.
func TestDelayedCastScaleAfterSteps(t *testing.T) {
	params := []optimizer.Param{{Name: "a", Shape: []int{512, 512}}, {Name: "b", Shape: []int{300, 300}}, {Name: "c", Shape: []int{1000}}}
	cfg := optimizer.Config{Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 2}}
	for _, seed := range []uint64{19, 25} {
		c := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, seed)))
		c.train(0, 2)
		saved := c.snapshot()
		root := t.TempDir()
		c.save(root, SaveOptions{})
		d := newCluster(t, 3, params, cfg, optimizer.FromMap(weights(params, 3)))
		d.must(d.load(root, LoadOptions{}))
		if diff := diffState(saved, d.snapshot()); diff != "" {
			t.Fatalf("seed %d: state after the load differs from the state saved: %s", seed, diff)
		}
	}
}
