package optimizer

import (
	"math"
	"testing"

	"github.com/distopt/distopt/fp8"
)

// refDelayedScale is the closed form of delayed scaling: the scale of the
// cast after the amaxes seen (oldest first; the first is the first cast's)
// is ScaleFromAmax of the reduction of the last n of them, zeros standing
// before the first.
func refDelayedScale(r fp8.Recipe, seen []float32) (scale, inv float32) {
	n := r.History()
	window := make([]float32, n)
	for i := range window {
		if k := len(seen) - n + i; k >= 0 {
			window[i] = seen[k]
		}
	}
	am := window[n-1]
	if r.HistoryReduce == fp8.HistoryMax {
		am = 0
		for _, a := range window {
			am = fp8.MaxAmax(am, a)
		}
	}
	return fp8.ScaleFromAmax(am, r.Format, r.Margin, r.PowerOf2)
}

// scaleSteps are the reduced amaxes of two slots for the first cast and
// five steps: ordinary values, a subnormal, zero, infinity and NaN.
var scaleSteps = [][]float32{
	{3.5, 1e-3},
	{7, 0},
	{2, 1e-40},
	{float32(math.Inf(1)), 600},
	{0.25, float32(math.NaN())},
	{0.5, 1e5},
}

// TestScaleStateCurrent checks current scaling and 128x128 tiles: every
// cast, first or not, uses ScaleFromAmax of its own amax.
func TestScaleStateCurrent(t *testing.T) {
	for _, r := range []fp8.Recipe{
		{Format: fp8.E4M3, Scaling: fp8.TensorCurrent},
		{Format: fp8.E5M2, Scaling: fp8.TensorCurrent, Margin: 2, PowerOf2: true},
		{Format: fp8.E4M3, Scaling: fp8.Block128x128, Margin: -1},
	} {
		t.Run(r.String(), func(t *testing.T) {
			s := newScaleState(r, 2)
			for k, amax := range scaleSteps {
				kind := castStep
				if k == 0 {
					kind = castFirst
				}
				if s.delayed(kind) {
					t.Fatalf("cast %d: %v casts in the update's pass", k, r)
				}
				s.reduced(kind, amax)
				for i, am := range amax {
					scale, inv := fp8.ScaleFromAmax(am, r.Format, r.Margin, r.PowerOf2)
					if s.Scale[i] != scale || s.Inv[i] != inv || s.Cast[i] != scale {
						t.Fatalf("cast %d slot %d: scale %g inv %g cast %g, want %g %g %g", k, i, s.Scale[i], s.Inv[i], s.Cast[i], scale, inv, scale)
					}
				}
			}
			if s.Histories() != nil {
				t.Fatalf("%v keeps amax histories", r)
			}
		})
	}
}

// TestScaleStateDelayed checks delayed scaling with each history rule and
// length against refDelayedScale: the first cast casts after the reduction
// with the scale of a history holding its own amax; each step's bytes were
// cast with the scale of the history before it, and its amax enters the
// history for the next cast.
func TestScaleStateDelayed(t *testing.T) {
	for _, r := range []fp8.Recipe{
		{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 1},
		{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 3},
		{Format: fp8.E5M2, Scaling: fp8.TensorDelayed, HistoryLen: 4, Margin: 1, PowerOf2: true},
		{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 1, HistoryReduce: fp8.HistoryMostRecent},
		{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 3, HistoryReduce: fp8.HistoryMostRecent},
	} {
		t.Run(r.String(), func(t *testing.T) {
			s := newScaleState(r, 2)
			seen := make([][]float32, 2)
			prev := make([]float32, 2) // the scale the bytes of this step were cast with
			for k, amax := range scaleSteps {
				kind := castStep
				if k == 0 {
					kind = castFirst
				}
				if s.delayed(kind) != (k > 0) {
					t.Fatalf("cast %d: delayed(%d) = %t", k, kind, s.delayed(kind))
				}
				s.reduced(kind, amax)
				for i, am := range amax {
					seen[i] = append(seen[i], am)
					scale, _ := refDelayedScale(r, seen[i])
					cast := scale // the first cast uses the scale it derives
					if k > 0 {
						cast = prev[i]
					}
					if s.Scale[i] != scale || s.Cast[i] != cast || s.Inv[i] != 1/cast {
						t.Fatalf("cast %d slot %d: scale %g cast %g inv %g, want %g %g %g", k, i, s.Scale[i], s.Cast[i], s.Inv[i], scale, cast, 1/cast)
					}
					prev[i] = scale
				}
			}
		})
	}
}

// TestScaleStateReload checks the cast after a checkpoint load: a state
// restored from another's histories and cast scales recasts the bytes with
// the cast scales, pushes nothing, and then follows the uninterrupted state
// step for step. A state loaded without scalars takes the first-cast path.
func TestScaleStateReload(t *testing.T) {
	r := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorDelayed, HistoryLen: 3}
	run := newScaleState(r, 2)
	run.reduced(castFirst, scaleSteps[0])
	run.reduced(castStep, scaleSteps[1])
	run.reduced(castStep, scaleSteps[2])
	hist, cast := run.Histories(), append([]float32(nil), run.Cast...)

	loaded := newScaleState(r, 2)
	loaded.Restore(hist, cast)
	if !loaded.delayed(castReload) {
		t.Fatal("the reload of delayed scaling does not cast in the update's pass")
	}
	loaded.reduced(castReload, []float32{1e6, 1e6}) // the recast's amax is not pushed
	for i := range cast {
		if loaded.Cast[i] != cast[i] || loaded.Inv[i] != 1/cast[i] || loaded.Scale[i] != run.Scale[i] {
			t.Fatalf("slot %d after the reload: cast %g inv %g scale %g, want %g %g %g", i, loaded.Cast[i], loaded.Inv[i], loaded.Scale[i], cast[i], 1/cast[i], run.Scale[i])
		}
	}
	for _, amax := range scaleSteps[3:] {
		run.reduced(castStep, amax)
		loaded.reduced(castStep, amax)
		for i := range amax {
			if run.Scale[i] != loaded.Scale[i] || run.Cast[i] != loaded.Cast[i] || run.Inv[i] != loaded.Inv[i] {
				t.Fatalf("slot %d: the reloaded state diverges from the uninterrupted one", i)
			}
		}
	}

	fresh := newScaleState(r, 2)
	if fresh.delayed(castFirst) {
		t.Fatal("the first cast of delayed scaling casts in the update's pass")
	}
	fresh.reduced(castFirst, scaleSteps[0])
	if scale, _ := refDelayedScale(r, scaleSteps[0][:1]); fresh.Scale[0] != scale {
		t.Fatalf("first cast: scale %g, want %g", fresh.Scale[0], scale)
	}
}
