package checkpoint

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/optimizer"
)

// storedMomentType is the type moments are saved in: bfloat16 when every
// moment of c is bfloat16, float32 otherwise. FP8 moments are saved as the
// float32 values they decode to (optimizer.ReadPieces), which a load
// encodes back to themselves at any data-parallel size: power-of-two block
// scales make decoding and encoding exact, and blocks are aligned to the
// parameter's own elements.
func storedMomentType(c optimizer.Config) buffer.DType {
	for _, t := range momentTypes(c) {
		if t != optimizer.MomentBFloat16 {
			return buffer.Float32
		}
	}
	return buffer.BFloat16
}

// momentTypes returns the storage of each of c's moments (c as
// optimizer.Optimizer.Config returns it, defaults applied).
func momentTypes(c optimizer.Config) []optimizer.MomentDType {
	ts := []optimizer.MomentDType{c.FirstMomentType, c.SecondMomentType}[:len(c.Rule.Moments())]
	for i, t := range ts {
		if t == optimizer.MomentDefault {
			ts[i] = optimizer.MomentFloat32
		}
	}
	return ts
}

// momentTypeNames is what the index records of c's moment types: nil
// when every moment is stored as the index's moment_type says.
func momentTypeNames(c optimizer.Config) []string {
	var names []string
	uniform := true
	for _, t := range momentTypes(c) {
		names = append(names, t.String())
		uniform = uniform && optimizer.MomentOf(storedMomentType(c)) == t
	}
	if uniform {
		return nil
	}
	return names
}

// checkMomentTypes refuses a load that would round the saved moments: each
// moment must be kept in the type it was saved from, or in float32.
func (st *loadState) checkMomentTypes(cur configRecord) error {
	saved, now := st.idx.Config.MomentTypes, cur.MomentTypes
	for i := range max(len(saved), len(now)) {
		s, n := st.idx.Config.MomentType, cur.MomentType
		if i < len(saved) {
			s = saved[i]
		}
		if i < len(now) {
			n = now[i]
		}
		if s != n && n != buffer.Float32.String() {
			return fmt.Errorf("checkpoint: %s holds moment %d as %s, the optimizer keeps it as %s: %w", st.dir, i, s, n, ErrMomentType)
		}
	}
	return nil
}
