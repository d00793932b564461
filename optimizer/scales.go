package optimizer

import (
	"fmt"

	"github.com/distopt/distopt/fp8"
)

// castKind says why the parameters are cast: the first cast from the
// initial masters, the cast after an update, or the recast after a
// checkpoint load. The scale bookkeeping of delayed scaling differs in each.
type castKind uint8

const (
	castFirst  castKind = iota // first cast from the initial masters
	castStep                   // after an update
	castReload                 // after a checkpoint load
)

// scaleState is the scale bookkeeping of the recipes whose scales derive
// from all-reduced amaxes (per-tensor current and delayed scaling, 128x128
// tiles): one slot per tensor or tile. It is a pure function of the reduced
// amaxes it is given (no collective, no backend): every rank feeds it the
// same amaxes and so holds the same scales.
//
// After each reduction it holds, per slot, the scale of the next cast
// (Scale), the scale_inv of the bytes held now (Inv, what views hand out),
// and the scale those bytes were cast with (Cast, what a checkpoint keeps so
// that a reload recasts the same bytes).
type scaleState struct {
	recipe fp8.Recipe
	// Scale, Inv and Cast hold one value per slot (see scaleState).
	Scale, Inv, Cast []float32
	history          []*fp8.AmaxHistory // TensorDelayed only
}

// newScaleState returns the state of n slots under recipe r, before any cast.
func newScaleState(r fp8.Recipe, n int) *scaleState {
	s := &scaleState{recipe: r, Scale: make([]float32, n), Inv: make([]float32, n), Cast: make([]float32, n)}
	if r.ScaleSource() == fp8.FromHistory {
		s.history = make([]*fp8.AmaxHistory, n)
		for i := range s.history {
			s.history[i] = r.NewHistory()
		}
	}
	return s
}

// delayed reports whether a cast of kind k casts in the update's own pass
// with the scale already held (delayed scaling after the first cast), so
// that the amaxes reduced afterwards only prepare the next cast. Otherwise
// the cast follows the reduction, with the scale derived from it.
func (s *scaleState) delayed(k castKind) bool {
	return s.recipe.ScaleSource() == fp8.FromHistory && k != castFirst
}

// reduced takes the all-reduced amax of every slot of a cast of kind k and
// sets Scale, Inv and Cast:
//
//   - current scaling and tiles: Scale, Inv = fp8.ScaleFromAmax(amax), and
//     the cast that follows uses Scale (Cast = Scale);
//   - the first cast of delayed scaling: each history is seeded with the
//     amax, and the cast that follows uses the history's scale;
//   - a step of delayed scaling: the bytes were cast with the previous
//     Scale (now Cast, Inv = 1/Cast); the amax is pushed into the history,
//     whose scale is the next cast's;
//   - the reload of delayed scaling: as a step, but nothing is pushed (the
//     history is the one saved; Restore set the Scale the bytes were cast
//     with).
func (s *scaleState) reduced(k castKind, amax []float32) {
	if len(amax) != len(s.Scale) {
		panic(fmt.Sprintf("optimizer: %d amaxes for %d scale slots", len(amax), len(s.Scale)))
	}
	r := s.recipe
	for i, am := range amax {
		switch {
		case s.delayed(k):
			s.Cast[i], s.Inv[i] = s.Scale[i], 1/s.Scale[i]
			if k == castStep {
				s.history[i].Push(am)
			}
			s.Scale[i], _ = s.history[i].Scale(r.Format, r.Margin, r.PowerOf2)
		case s.recipe.ScaleSource() == fp8.FromHistory: // the first cast
			s.history[i].Push(am)
			s.Scale[i], s.Inv[i] = s.history[i].Scale(r.Format, r.Margin, r.PowerOf2)
			s.Cast[i] = s.Scale[i]
		default:
			s.Scale[i], s.Inv[i] = fp8.ScaleFromAmax(am, r.Format, r.Margin, r.PowerOf2)
			s.Cast[i] = s.Scale[i]
		}
	}
}

// Histories returns a copy of every amax history, oldest first (nil unless
// delayed scaling).
func (s *scaleState) Histories() [][]float32 {
	var out [][]float32
	for _, h := range s.history {
		out = append(out, h.Values())
	}
	return out
}

// Restore replaces the histories with saved ones and sets Scale to the
// scales the saved bytes were cast with, for a reload (castReload) to recast
// exactly those bytes. The lengths must match (checked by the caller).
func (s *scaleState) Restore(histories [][]float32, cast []float32) {
	for i, vals := range histories {
		h := s.recipe.NewHistory()
		for _, v := range vals {
			h.Push(v)
		}
		s.history[i] = h
		s.Scale[i] = cast[i]
	}
}

// set replaces the histories (oldest first), and the scales, scale_inv and
// cast scales of every slot, with the device's copy of them.
func (s *scaleState) set(histories [][]float32, scale, inv, cast []float32) {
	for i, vals := range histories {
		h := s.recipe.NewHistory()
		for _, v := range vals {
			h.Push(v)
		}
		s.history[i] = h
	}
	copy(s.Scale, scale)
	copy(s.Inv, inv)
	copy(s.Cast, cast)
}
