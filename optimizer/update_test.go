package optimizer_test

import (
	"math"
	"strings"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// TestAdamWClosedForm compares a few AdamW steps in float32 with the same
// algorithm computed in float64. Each step does about a dozen float32
// operations per element, each with relative error at most 2^-24; the update
// term is bounded by lr*|m/d| <= lr/(1-beta1)*..., so after 5 steps the
// masters may differ by a few ulps of the update: we allow 1e-6 absolute
// (the masters are O(0.05), the updates O(1e-2)), a thousand times less than
// the effect of a wrong bias correction or a missing decay (>= 1e-5).
func TestAdamWClosedForm(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{5, 7}}, {Name: "n", Shape: []int{7}, HighPrecision: true, NoDecay: true}}
	cfg := optimizer.Config{LR: optimizer.Constant(1e-2), WeightDecay: 0.1, GradType: buffer.Float32}
	const steps = 5
	res := optimizertest.Run(t, 1, steps, params, cfg, optimizertest.RankGrad)
	init := optimizertest.InitWeights(params, 1)
	for _, ps := range res[0].Pieces {
		var p0 optimizer.Param
		for _, p := range params {
			if p.Name == ps.Param {
				p0 = p
			}
		}
		wd := 0.1
		if p0.NoDecay {
			wd = 0
		}
		for i := range ps.Master {
			p, m, v := float64(init[ps.Param][ps.Offset+i]), 0.0, 0.0
			for s := 1; s <= steps; s++ {
				g := float64(optimizertest.RankGrad(p0, s-1, 0)[ps.Offset+i])
				p *= 1 - 1e-2*wd
				m = 0.9*m + 0.1*g
				v = 0.999*v + 0.001*g*g
				mh := m / (1 - math.Pow(0.9, float64(s)))
				vh := v / (1 - math.Pow(0.999, float64(s)))
				p -= 1e-2 * mh / (math.Sqrt(vh) + 1e-8)
			}
			if d := math.Abs(float64(ps.Master[i]) - p); d > 1e-6 {
				t.Fatalf("%s[%d]: float32 %g, float64 %g (diff %g)", ps.Param, i, ps.Master[i], p, d)
			}
		}
	}
}

// TestSGDClosedForm checks SGD with momentum and coupled weight decay.
func TestSGDClosedForm(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{33}}}
	cfg := optimizer.Config{Rule: optimizer.RuleSGD, Momentum: 0.9, LR: optimizer.Constant(0.05), WeightDecay: 0.01, GradType: buffer.Float32}
	const steps = 4
	res := optimizertest.Run(t, 1, steps, params, cfg, optimizertest.RankGrad)
	init := optimizertest.InitWeights(params, 1)["w"]
	for i, got := range res[0].Pieces[0].Master {
		p, buf := float64(init[i]), 0.0
		for s := range steps {
			g := float64(optimizertest.RankGrad(params[0], s, 0)[i]) + 0.01*p
			buf = 0.9*buf + g
			p -= 0.05 * buf
		}
		if d := math.Abs(float64(got) - p); d > 1e-6 {
			t.Fatalf("w[%d]: float32 %g, float64 %g", i, got, p)
		}
	}
}

// TestNonFiniteSkip puts a NaN or an Inf in one rank's gradient: every rank
// skips the step, reports it, and keeps its state.
func TestNonFiniteSkip(t *testing.T) {
	params := optimizertest.AwkwardParams()
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1)), 1e30} {
		cfg := optimizer.Config{Groups: optimizertest.Groups()}
		grad := func(p optimizer.Param, s, r int) []float32 {
			g := optimizertest.RankGrad(p, s, r)
			if s == 1 && r == 2 && p.Name == "prime" {
				g[100] = bad
			}
			return g
		}
		res := optimizertest.Run(t, 4, 3, params, cfg, grad)
		scaled := cfg
		scaled.LossScaler = &optimizer.LossScaler{InitScale: 1 << 10}
		withScaler := optimizertest.Run(t, 4, 3, params, scaled, grad)
		clean := optimizertest.Run(t, 4, 2, params, cfg, func(p optimizer.Param, s, r int) []float32 {
			if s == 1 {
				s = 2
			}
			return optimizertest.RankGrad(p, s, r)
		})
		for r := range res {
			sr := res[r].Results[1]
			if !sr.Skipped || !strings.Contains(sr.Reason, "not finite") || sr.Step != 1 {
				t.Fatalf("bad=%g rank %d: step 1 = %+v, want skipped", bad, r, sr)
			}
			if res[r].Results[2].Step != 2 {
				t.Fatalf("rank %d: after the skip %+v, want step 2", r, res[r].Results[2])
			}
			if ws := withScaler[r].Results; !ws[1].Skipped || ws[1].LossScale != 1024 || ws[2].LossScale != 512 {
				t.Fatalf("rank %d: loss scale %g then %g, want 1024 then 512 after the skip", r, ws[1].LossScale, ws[2].LossScale)
			}
			// Skipping step 1 and taking step 2 equals taking steps 0 and 2.
			for i, ps := range res[r].Pieces {
				if optimizertest.FirstDiff(ps.Master, clean[r].Pieces[i].Master) >= 0 {
					t.Fatalf("bad=%g rank %d: %s differs from the run without the bad step", bad, r, ps.Param)
				}
			}
		}
	}
}
