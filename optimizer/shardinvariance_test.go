package optimizer_test

import (
	"bytes"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// TestShardInvariance checks that every rank of a sharded run holds masters
// and moments bit-identical to a single-rank run fed the averaged gradients,
// and the same FP8 bytes and scales, for every recipe and awkward sizes.
func TestShardInvariance(t *testing.T) {
	params := optimizertest.AwkwardParams()
	const steps = 5
	worlds := []int{2, 3, 4, 7, 8}
	if testing.Short() {
		worlds = []int{3, 8}
	}
	for name, cfg := range optimizertest.Configs() {
		t.Run(name, func(t *testing.T) {
			gt := optimizertest.GradType(cfg)
			for _, d := range worlds {
				ref := optimizertest.Run(t, 1, steps, params, cfg, func(p optimizer.Param, s, _ int) []float32 { return optimizertest.MeanGrad(p, s, d, gt) })[0]
				got := optimizertest.Run(t, d, steps, params, cfg, optimizertest.RankGrad)
				compare(t, d, ref, got)
			}
		})
	}
}

// compare fails t unless every rank of got took the same steps as ref (skip,
// gradient norm and clip coefficient) and holds the same state (see
// optimizertest.Diff).
func compare(t *testing.T, d int, ref optimizertest.Result, got []optimizertest.Result) {
	t.Helper()
	for r, g := range got {
		for i, sr := range g.Results {
			want := ref.Results[i]
			if sr.Skipped != want.Skipped || sr.GradNorm != want.GradNorm || sr.ClipCoef != want.ClipCoef {
				t.Fatalf("d=%d rank %d step %d: %+v, reference %+v", d, r, i, sr, want)
			}
		}
		if diffs := optimizertest.Diff(ref, g); diffs != nil {
			t.Fatalf("d=%d rank %d: %s", d, r, diffs[0])
		}
	}
}

// TestReferenceCast checks that the FP8 bytes and scales held after steps are
// the fp8 package's own cast of the master weights.
func TestReferenceCast(t *testing.T) {
	params := optimizertest.AwkwardParams()
	for name, cfg := range optimizertest.Configs() {
		if cfg.Recipe.Scaling == fp8.TensorDelayed {
			continue // the cast scale comes from the history, checked in TestDelayedScaling
		}
		t.Run(name, func(t *testing.T) {
			res := optimizertest.Run(t, 3, 3, params, cfg, optimizertest.RankGrad)
			masters := map[string][]float32{}
			for _, p := range params {
				masters[p.Name] = make([]float32, optimizertest.Numel(p.Shape))
			}
			for _, rr := range res {
				for _, ps := range rr.Pieces {
					copy(masters[ps.Param][ps.Offset:], ps.Master)
				}
			}
			rc := cfg.Recipe
			if rc.Format == 0 {
				rc = fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
			}
			for _, p := range params {
				if p.HighPrecision {
					hp := cfg.HighPrecisionType
					want := masters[p.Name]
					if hp != buffer.Float32 {
						want = optimizertest.Round(want, buffer.BFloat16)
					}
					if i := optimizertest.FirstDiff(res[1].Weights[p.Name], want); i >= 0 {
						t.Fatalf("%s: high-precision copy differs at %d", p.Name, i)
					}
					continue
				}
				want, err := fp8.Quantize(masters[p.Name], p.Shape, rc, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := res[2].Tensors[p.Name]
				if !bytes.Equal(got.Data, want.Data) || optimizertest.FirstDiff(got.ScaleInv, want.ScaleInv) >= 0 {
					t.Fatalf("%s: FP8 bytes or scale_inv differ from fp8.Quantize of the master", p.Name)
				}
			}
		})
	}
}
