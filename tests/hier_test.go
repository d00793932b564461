package tests

// Hierarchical sharding (collective/hier) against flat sharding: the same
// gradients give the same bits, and checkpoints move between the two.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/hier"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/checkpoint"
)

// hierParams has a 2-D weight large enough for 128x128 tiles, a weight
// whose rows do not divide the shards, and a high-precision bias.
var hierParams = []optimizer.Param{
	{Name: "w1", Shape: []int{256, 128}},
	{Name: "w2", Shape: []int{40, 128}},
	{Name: "b1", Shape: []int{256}, HighPrecision: true, NoDecay: true},
}

const hierWorld = 6

// exactGrad is the gradient of global rank r at step s: 6·n·2^-12 with n
// a small integer in [-7, 7]. Every partial sum over up to 6 ranks is 6·m·
// 2^-12 with |m| <= 42, so 8 significant bits: exact in BF16. Divided by
// 6, or by 2 or 3 then by 3 or 2, it stays exact. So every order of
// addition and every factorization of the average gives the same bits:
// this is the condition under which hierarchical and flat reductions agree
// (see collective/hier's documentation).
func exactGrad(r, s int, name string, j int) float32 {
	n := (r*31+s*17+j*7+len(name)*3)%15 - 7
	return float32(6*n) * 0x1p-12
}

// elems is the number of elements of p.
func elems(p optimizer.Param) int {
	n := 1
	for _, s := range p.Shape {
		n *= s
	}
	return n
}

// hierInit is the initial value of every parameter.
func hierInit(name string, offset int, dst []float32) error {
	for i := range dst {
		dst[i] = float32((offset+i)%29-14) / 64
	}
	return nil
}

// fullState is the whole optimizer state, assembled from every rank's
// pieces: masters, moments and gathered weights per parameter.
type fullState map[string][]float32

// onWorld runs fn on every rank of comms at once (rank r gets comms[r])
// and returns the ranks' errors joined.
func onWorld(comms []collective.Communicator, fn func(ctx context.Context, r int, c collective.Communicator) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() { errs[r] = fn(ctx, r, c) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// world returns the d = 6 communicators of flat sharding (g = 0) or of
// groups of g, by global rank.
func world(t *testing.T, g int) []collective.Communicator {
	t.Helper()
	if g == 0 {
		return inproc.Communicators(hierWorld)
	}
	hc, err := hier.InProcess(hierWorld, g)
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]collective.Communicator, len(hc))
	for i, c := range hc {
		comms[i] = c
	}
	return comms
}

// stepAll runs steps from..to-1 of exactGrad on o (global rank r).
func stepAll(ctx context.Context, o *optimizer.Optimizer, r, from, to int) error {
	for s := from; s < to; s++ {
		for _, p := range hierParams {
			g := make([]float32, elems(p))
			for j := range g {
				g[j] = exactGrad(r, s, p.Name, j)
			}
			if err := o.SetGrad(p.Name, g); err != nil {
				return err
			}
		}
		if _, err := o.Step(ctx); err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
	}
	return nil
}

// rankDump is what one rank holds of the optimizer state: its pieces and
// the gathered weights of every parameter.
type rankDump struct {
	Pieces  []optimizer.PieceState
	Weights map[string][]float32
}

// dumpRank returns o's pieces and gathered weights.
func dumpRank(o *optimizer.Optimizer) (rankDump, error) {
	pieces, err := o.ReadPieces()
	if err != nil {
		return rankDump{}, err
	}
	d := rankDump{Pieces: pieces, Weights: map[string][]float32{}}
	for _, p := range hierParams {
		if d.Weights[p.Name], err = o.Weights(p.Name); err != nil {
			return rankDump{}, err
		}
	}
	return d, nil
}

// collect adds o's pieces and gathered weights to st under mu, and fails
// if a replica (another group) put different bits there before.
func collect(o *optimizer.Optimizer, st fullState, mu *sync.Mutex) error {
	d, err := dumpRank(o)
	if err != nil {
		return err
	}
	return merge(d, st, mu)
}

// merge adds one rank's dump to st under mu, and fails if a replica
// (another group) put different bits there before.
func merge(d rankDump, st fullState, mu *sync.Mutex) error {
	mu.Lock()
	defer mu.Unlock()
	put := func(key string, off int, xs []float32, size int) error {
		if st[key] == nil {
			st[key] = make([]float32, size)
			for i := range st[key] {
				st[key][i] = float32(math.NaN())
			}
		}
		for i, x := range xs {
			old := st[key][off+i]
			if old == old && math.Float32bits(old) != math.Float32bits(x) {
				return fmt.Errorf("%s[%d]: replicas hold %v and %v", key, off+i, old, x)
			}
			st[key][off+i] = x
		}
		return nil
	}
	sizes := map[string]int{}
	for _, p := range hierParams {
		sizes[p.Name] = elems(p)
		w := d.Weights[p.Name]
		if err := put(p.Name+".weights", 0, w, len(w)); err != nil {
			return err
		}
	}
	for _, p := range d.Pieces {
		n := sizes[p.Param]
		if err := errors.Join(put(p.Param+".master", p.Offset, p.Master, n), put(p.Param+".m", p.Offset, p.M, n), put(p.Param+".v", p.Offset, p.V, n)); err != nil {
			return err
		}
	}
	return nil
}

// trainHier runs steps steps of exactGrad on the world of group size g (0:
// flat), optionally saving into saveDir (group 0 only: the groups are
// replicas) or first loading loadDir, and returns the full state.
func trainHier(t *testing.T, g int, cfg optimizer.Config, steps int, saveDir, loadDir string) fullState {
	t.Helper()
	st, mu := fullState{}, &sync.Mutex{}
	err := onWorld(world(t, g), func(ctx context.Context, r int, c collective.Communicator) error {
		o, err := optimizer.New(ctx, c, cpu.New(1), hierParams, hierInit, cfg)
		if err != nil {
			return err
		}
		defer o.Close()
		from := 0
		if loadDir != "" {
			info, err := checkpoint.Load(ctx, o, c, loadDir, checkpoint.LoadOptions{})
			if err != nil {
				return err
			}
			from = info.Step
		}
		if err := stepAll(ctx, o, r, from, steps); err != nil {
			return err
		}
		if h, ok := c.(*hier.Comm); saveDir != "" && (!ok || h.Leader()) {
			if _, err := checkpoint.Save(ctx, o, c, saveDir, checkpoint.SaveOptions{}); err != nil {
				return err
			}
		}
		return collect(o, st, mu)
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// sameState reports the first difference between two states.
func sameState(a, b fullState) error {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(a) != len(b) {
		return fmt.Errorf("%d and %d arrays", len(a), len(b))
	}
	for _, k := range keys {
		x, y := a[k], b[k]
		if len(x) != len(y) {
			return fmt.Errorf("%s: %d and %d elements", k, len(x), len(y))
		}
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				return fmt.Errorf("%s[%d]: %v and %v", k, i, x[i], y[i])
			}
		}
	}
	return nil
}

// TestHierarchicalMatchesFlat: for gradients whose reductions are exact
// (exactGrad), 2 groups x 3 ranks and 3 groups x 2 leave every master,
// moment and gathered weight bit-identical to flat sharding over 6 ranks,
// for every recipe; every group holds the same replica.
func TestHierarchicalMatchesFlat(t *testing.T) {
	steps := 4
	if testing.Short() {
		steps = 2
	}
	for _, name := range fp8.RecipeNames() {
		t.Run(name, func(t *testing.T) {
			r, err := fp8.ParseRecipe(name)
			if err != nil {
				t.Fatal(err)
			}
			cfg := optimizer.Config{LR: optimizer.Constant(1e-2), WeightDecay: 0.1, MaxGradNorm: 0.5, Recipe: r}
			flat := trainHier(t, 0, cfg, steps, "", "")
			for _, g := range []int{3, 2} {
				if err := sameState(flat, trainHier(t, g, cfg, steps, "", "")); err != nil {
					t.Errorf("%d groups x %d vs flat 6: %v", hierWorld/g, g, err)
				}
			}
		})
	}
}

// A checkpoint saved by one group of a hierarchical run (a g-rank
// checkpoint) loads into flat sharding over 6 ranks, and one saved flat
// loads into every group of a hierarchical run; both continue to the same
// bits as an uninterrupted flat run.
func TestHierarchicalCheckpoints(t *testing.T) {
	cfg := optimizer.Config{LR: optimizer.Constant(1e-2), WeightDecay: 0.1, MaxGradNorm: 0.5, Recipe: fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.Block1x128}}
	const half, steps = 2, 4
	want := trainHier(t, 0, cfg, steps, "", "")
	for _, tc := range []struct {
		name       string
		save, load int // group sizes, 0: flat
	}{
		{"3x2 to flat", 2, 0},
		{"2x3 to flat", 3, 0},
		{"flat to 2x3", 0, 3},
		{"flat to 3x2", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			trainHier(t, tc.save, cfg, half, dir, "")
			path, err := checkpoint.Latest(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameState(want, trainHier(t, tc.load, cfg, steps, "", path)); err != nil {
				t.Error(err)
			}
		})
	}
}
