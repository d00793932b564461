package checkpoint

import (
	"errors"
	"slices"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// savedRun trains 2 ranks 2 steps under cfg, saves under a new root and
// returns it with the state saved.
func savedRun(t *testing.T, cfg optimizer.Config) (string, state) {
	t.Helper()
	params := testParams()
	root := t.TempDir()
	c := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	c.train(0, 2)
	st := c.snapshot()
	c.save(root, SaveOptions{})
	return root, st
}

// TestLoadMismatch loads checkpoints into optimizers that differ from the
// saved one: refused with the named sentinel, or loaded with the option
// that allows it.
func TestLoadMismatch(t *testing.T) {
	configs := testConfigs()
	current, sgd := configs["E4M3 current"], configs["sgd bf16 momentum"]
	root, _ := savedRun(t, current)
	bf16 := current
	bf16.FirstMomentType, bf16.SecondMomentType = optimizer.MomentBFloat16, optimizer.MomentBFloat16
	bf16Root, _ := savedRun(t, bf16)
	fp8m := configs["fp8 moments"]
	fp8Root, _ := savedRun(t, fp8m)
	mx := current
	mx.Recipe = fp8.Recipe{Format: fp8.E5M2, Scaling: fp8.MXFP8}
	params := testParams()
	edit := func(f func(ps []optimizer.Param) []optimizer.Param) []optimizer.Param { return f(testParams()) }
	cases := []struct {
		name   string
		root   string
		params []optimizer.Param
		cfg    optimizer.Config
		opts   LoadOptions
		want   error // nil: the load succeeds
	}{
		{"parameter missing", root, edit(func(ps []optimizer.Param) []optimizer.Param {
			return append(ps, optimizer.Param{Name: "extra", Shape: []int{4}})
		}), current, LoadOptions{}, ErrParamMissing},
		{"parameter unused", root, edit(func(ps []optimizer.Param) []optimizer.Param { return ps[:len(ps)-1] }), current, LoadOptions{}, ErrParamMissing},
		{"parameter unused, allowed", root, edit(func(ps []optimizer.Param) []optimizer.Param { return ps[:len(ps)-1] }), current, LoadOptions{AllowUnused: true}, nil},
		{"shape", root, edit(func(ps []optimizer.Param) []optimizer.Param {
			ps[len(ps)-1].Shape = []int{5, 3}
			return ps
		}), current, LoadOptions{}, ErrShape},
		{"recipe", root, params, mx, LoadOptions{}, ErrRecipe},
		{"recipe converted", root, params, mx, LoadOptions{ConvertRecipe: true}, nil},
		{"high-precision mark", root, edit(func(ps []optimizer.Param) []optimizer.Param {
			ps[1].HighPrecision = false
			return ps
		}), current, LoadOptions{}, ErrRecipe},
		{"high-precision mark converted", root, edit(func(ps []optimizer.Param) []optimizer.Param {
			ps[1].HighPrecision = false
			return ps
		}), current, LoadOptions{ConvertRecipe: true}, nil},
		{"rule", root, params, sgd, LoadOptions{ConvertRecipe: true, WidenMoments: true}, ErrRule},
		{"bf16 moments into fp32", bf16Root, params, current, LoadOptions{}, ErrMomentType},
		{"bf16 moments widened", bf16Root, params, current, LoadOptions{WidenMoments: true}, nil},
		{"fp32 moments into bf16", root, params, bf16, LoadOptions{WidenMoments: true}, ErrMomentType},
		{"fp32 moments into fp8", root, params, fp8m, LoadOptions{}, ErrMomentType},
		{"fp8 moments into fp32", fp8Root, params, current, LoadOptions{}, nil},
		{"fp8 moments into bf16", fp8Root, params, bf16, LoadOptions{WidenMoments: true}, ErrMomentType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := newCluster(t, 3, c.params, c.cfg, optimizer.FromMap(weights(c.params, 9)))
			before := dst.snapshot()
			for r, err := range dst.load(c.root, c.opts) {
				if !errors.Is(err, c.want) {
					t.Fatalf("rank %d: %v, want %v", r, err, c.want)
				}
			}
			if c.want != nil {
				if d := diffState(before, dst.snapshot()); d != "" {
					t.Fatalf("a refused load changed the optimizer: %s", d)
				}
			}
			dst.train(2, 1)
		})
	}
}

// TestConvert loads masters and moments saved under one configuration into
// another (recipe, high-precision marks, moment type): masters and moments
// equal those saved (bfloat16 moments widened exactly); the step and loss
// scale are restored; and the FP8 parameters and amax histories are those
// New makes from the loaded masters under the new configuration.
func TestConvert(t *testing.T) {
	configs := testConfigs()
	from := configs["bf16 moments, loss scaler, delayed most-recent"]
	root, saved := savedRun(t, from)
	params := testParams()
	for _, target := range []fp8.Recipe{
		{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 5},
		{Format: fp8.E5M2, Scaling: fp8.TensorCurrent, PowerOf2: true},
		{Format: fp8.E4M3, Scaling: fp8.Block1x128},
	} {
		t.Run(target.String(), func(t *testing.T) {
			cfg := from
			cfg.Recipe, cfg.FirstMomentType, cfg.SecondMomentType = target, optimizer.MomentFloat32, optimizer.MomentFloat32
			ps := testParams()
			ps[5].HighPrecision = false // "tiny" becomes FP8
			dst := newCluster(t, 3, ps, cfg, optimizer.FromMap(weights(ps, 9)))
			dst.must(dst.load(root, LoadOptions{ConvertRecipe: true, WidenMoments: true}))
			got := dst.snapshot()
			for _, p := range params {
				if i := optimizertest.FirstDiff(got.master[p.Name], saved.master[p.Name]); i >= 0 {
					t.Fatalf("master of %s differs at %d", p.Name, i)
				}
				if optimizertest.FirstDiff(got.m[p.Name], saved.m[p.Name]) >= 0 || optimizertest.FirstDiff(got.v[p.Name], saved.v[p.Name]) >= 0 {
					t.Fatalf("moments of %s differ", p.Name)
				}
			}
			if got.scalars.Step != saved.scalars.Step || got.scalars.LossScale != saved.scalars.LossScale || got.scalars.LossScaleGood != saved.scalars.LossScaleGood {
				t.Fatalf("scalars %+v, saved %+v", got.scalars, saved.scalars)
			}
			// The reference: New from the saved masters under the new configuration.
			ref := newCluster(t, 2, ps, cfg, optimizer.FromMap(saved.master)).snapshot()
			ref.scalars.Step, ref.scalars.LossScale, ref.scalars.LossScaleGood = got.scalars.Step, got.scalars.LossScale, got.scalars.LossScaleGood
			if d := diffHeld(ref, got); d != "" {
				t.Fatalf("converted parameters differ from New's: %s", d)
			}
			dst.train(3, 2)
		})
	}
}

// TestSaveRefusals covers the errors of Save itself.
func TestSaveRefusals(t *testing.T) {
	params, cfg := testParams(), testConfigs()["E4M3 current"]
	c := newCluster(t, 2, params, cfg, optimizer.FromMap(weights(params, 1)))
	c.train(0, 1)
	root := t.TempDir()
	c.save(root, SaveOptions{})
	t.Run("latest has this step", func(t *testing.T) {
		for r, err := range c.run(func(r int, o *optimizer.Optimizer, comm collective.Communicator) error {
			ctx, cancel := testCtx()
			defer cancel()
			_, err := Save(ctx, o, comm, root, SaveOptions{})
			return err
		}) {
			if !errors.Is(err, ErrExists) {
				t.Fatalf("rank %d: %v, want ErrExists", r, err)
			}
		}
	})
	t.Run("communicator of another size", func(t *testing.T) {
		other := inproc.Communicators(3)
		defer func() {
			for _, c := range other {
				c.Close()
			}
		}()
		ctx, cancel := testCtx()
		defer cancel()
		if _, err := Save(ctx, c.opts[0], other[0], root, SaveOptions{}); !errors.Is(err, ErrComm) {
			t.Fatalf("%v, want ErrComm", err)
		}
		if _, err := Load(ctx, c.opts[0], other[0], root, LoadOptions{}); !errors.Is(err, ErrComm) {
			t.Fatalf("%v, want ErrComm", err)
		}
	})
	t.Run("keep", func(t *testing.T) {
		for s := 1; s <= 3; s++ {
			c.train(s, 1)
			c.save(root, SaveOptions{Keep: 2})
		}
		dirs, err := stepDirs(root)
		if err != nil {
			t.Fatal(err)
		}
		var steps []int
		for _, d := range dirs {
			steps = append(steps, d.step)
		}
		if !slices.Equal(steps, []int{3, 4}) {
			t.Fatalf("kept steps %v, want [3 4]", steps)
		}
	})
}
