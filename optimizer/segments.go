package optimizer

import (
	"github.com/distopt/distopt/internal/invariants"
	"github.com/distopt/distopt/optimizer/backend"
)

// checkInvariants turns on the checks of the segment tables the optimizer
// hands to its backend: always in this package's tests, and in builds with
// the tag invariants.
var checkInvariants = invariants.Enabled

// mustSegments panics when checks are on and segs is not a valid table of
// a shard of n elements under the optimizer's recipe.
func (o *Optimizer) mustSegments(segs []backend.Segment, n int) {
	if !checkInvariants {
		return
	}
	_, block := o.cfg.Recipe.Block()
	if err := backend.CheckSegments(segs, n, block); err != nil {
		panic(err)
	}
}
