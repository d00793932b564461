package optimizer_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/optimizertest"
)

// TestDelayedScaling follows the amax history by hand: the initial cast
// seeds each history with the master's amax; step k casts with the scale of
// the history before its own amax is pushed.
func TestDelayedScaling(t *testing.T) {
	params := []optimizer.Param{{Name: "w", Shape: []int{40, 30}}, {Name: "v", Shape: []int{77}}}
	for _, reduce := range []fp8.HistoryReduce{fp8.HistoryMax, fp8.HistoryMostRecent} {
		rc := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 3, HistoryReduce: reduce, Margin: 1}
		cfg := optimizer.Config{Recipe: rc, LR: optimizer.Constant(0.05)}
		init := optimizertest.InitWeights(params, 3)
		o, err := optimizer.New(context.Background(), inproc.Communicators(1)[0], cpu.New(1), params, optimizer.FromMap(init), cfg)
		if err != nil {
			t.Fatal(err)
		}
		hist := map[string]*fp8.AmaxHistory{}
		for _, p := range params {
			hist[p.Name] = rc.NewHistory()
			hist[p.Name].Push(fp8.Amax(init[p.Name]))
		}
		for step := range 6 {
			if step > 0 {
				for _, p := range params {
					g := optimizertest.RankGrad(p, step, 0)
					for i := range g {
						g[i] *= float32(step * step) // growing gradients move the amax
					}
					if err := o.SetGrad(p.Name, g); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := o.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			pieces, err := o.ReadPieces()
			if err != nil {
				t.Fatal(err)
			}
			for _, ps := range pieces {
				h := hist[ps.Param]
				scale, scaleInv := h.Scale(rc.Format, rc.Margin, rc.PowerOf2)
				want := make([]byte, len(ps.Master))
				am := fp8.CastScaled(want, ps.Master, scale, rc.Format)
				if step > 0 {
					h.Push(am)
				}
				got, err := o.Tensor(ps.Param)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Data, want) || got.ScaleInv[0] != scaleInv {
					t.Fatalf("%v step %d %s: bytes or scale_inv (%g, want %g) differ from the hand-kept history", reduce, step, ps.Param, got.ScaleInv[0], scaleInv)
				}
			}
		}
		o.Close()
	}
}
