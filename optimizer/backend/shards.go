package backend

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/distopt/distopt/buffer"
)

// CheckShards returns an error naming the first field in which the update
// arguments as differ where UpdateShards requires them alike: everything
// but the shard's buffers, N, Segments, MomentSeed and MomentBase; HPType
// is compared among the shards that have HP, and no shard may have both
// FP8 and HP.
func CheckShards(as []*UpdateArgs) error {
	if len(as) == 0 {
		return errors.New("backend: UpdateShards without shards")
	}
	var hp buffer.DType
	seen := false // a shard with HP came before
	for i, a := range as {
		if f := launchDiff(as[0], a); f != "" {
			return fmt.Errorf("backend: UpdateShards: shard %d differs from shard 0 in %s", i, f)
		}
		if a.FP8 != nil && a.HP != nil {
			return fmt.Errorf("backend: UpdateShards: shard %d has both FP8 bytes and a high-precision copy (a shard writes one or the other)", i)
		}
		if a.HP != nil {
			if seen && a.HPType != hp {
				return fmt.Errorf("backend: UpdateShards: shard %d differs in HPType (%v, not %v)", i, a.HPType, hp)
			}
			hp, seen = a.HPType, true
		}
	}
	return nil
}

// shardFields are the fields of UpdateArgs each shard of
// UpdateShards has its own; launchDiff compares every other one (a test
// checks that the two lists cover the struct).
var shardFields = []string{"N", "Master", "M", "V", "MomentSeed", "MomentBase", "MScales", "VScales", "Grad", "Segments", "FP8", "BlockScales", "HP", "HPType"}

// launchDiff returns the first field, in declaration order, of the launch
// (what UpdateShards takes from the first shard) in which a and b differ,
// or "": the buffers differ unless they are the same memory (sameBuffer).
// Written out field by field: reflection cost tens of microseconds a step.
func launchDiff(a, b *UpdateArgs) string {
	switch {
	case a.Rule != b.Rule:
		return "Rule"
	case a.Hyper != b.Hyper:
		return "Hyper"
	case !sameBuffer(a.Control, b.Control):
		return "Control"
	case a.MomentType != b.MomentType:
		return "MomentType"
	case a.MType != b.MType:
		return "MType"
	case a.VType != b.VType:
		return "VType"
	case a.MomentBlock != b.MomentBlock:
		return "MomentBlock"
	case a.GradType != b.GradType:
		return "GradType"
	case a.Recipe != b.Recipe:
		return "Recipe"
	case !sameBuffer(a.Amax, b.Amax):
		return "Amax"
	case !sameBuffer(a.Scale, b.Scale):
		return "Scale"
	}
	return ""
}

// launchFields are the fields launchDiff compares, in its order.
var launchFields = []string{"Rule", "Hyper", "Control", "MomentType", "MType", "VType", "MomentBlock", "GradType", "Recipe", "Amax", "Scale"}

// CheckCastShards is CheckShards for CastShards: Format, Scale and Control
// alike.
func CheckCastShards(cs []*CastArgs) error {
	if len(cs) == 0 {
		return errors.New("backend: CastShards without shards")
	}
	for i, c := range cs[1:] {
		if f := castLaunchDiff(cs[0], c); f != "" {
			return fmt.Errorf("backend: CastShards: shard %d differs from shard 0 in %s", i+1, f)
		}
	}
	return nil
}

// castShardFields are the fields of CastArgs each shard of
// CastShards has its own; castLaunchDiff compares the others
// (castLaunchFields), as launchDiff does for UpdateShards.
var (
	castShardFields  = []string{"N", "Master", "Segments", "FP8"}
	castLaunchFields = []string{"Format", "Scale", "Control"}
)

// castLaunchDiff is launchDiff for CastShards.
func castLaunchDiff(a, b *CastArgs) string {
	switch {
	case a.Format != b.Format:
		return "Format"
	case !sameBuffer(a.Scale, b.Scale):
		return "Scale"
	case !sameBuffer(a.Control, b.Control):
		return "Control"
	}
	return ""
}

// sameBuffer reports whether x and y are the same bytes of the same
// memory (both nil included).
func sameBuffer(x, y buffer.Buffer) bool {
	switch x := x.(type) {
	case nil:
		return y == nil
	case buffer.HostBuffer:
		y, ok := y.(buffer.HostBuffer)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	case buffer.DeviceBuffer:
		y, ok := y.(buffer.DeviceBuffer)
		return ok && x == y
	}
	// other kinds: the same value of the same comparable type (a pointer:
	// the same object; never equal contents of two buffers)
	if y == nil || reflect.TypeOf(x) != reflect.TypeOf(y) || !reflect.TypeOf(x).Comparable() {
		return false
	}
	return x == y
}

// CheckStepValues returns an error unless v fits the planned update
// arguments as: one list of factors per shard, one factor per segment,
// one seed per shard.
func CheckStepValues(as []*UpdateArgs, v StepValues) error {
	if len(v.Factors) != len(as) || len(v.Seeds) != len(as) {
		return fmt.Errorf("backend: step values for %d and %d shards (factors, seeds) of a plan of %d", len(v.Factors), len(v.Seeds), len(as))
	}
	for i, a := range as {
		if len(v.Factors[i]) != len(a.Segments) {
			return fmt.Errorf("backend: %d factors for the %d segments of shard %d", len(v.Factors[i]), len(a.Segments), i)
		}
	}
	return nil
}

// Apply returns copies of the planned update arguments as with v's values
// (Hyper, every segment's Factors, every shard's MomentSeed): what a Run
// of their UpdatePlan with v updates.
func (v StepValues) Apply(as []*UpdateArgs) ([]*UpdateArgs, error) {
	if err := CheckStepValues(as, v); err != nil {
		return nil, err
	}
	out := make([]*UpdateArgs, len(as))
	for i, a := range as {
		b := *a
		b.Hyper, b.MomentSeed = v.Hyper, v.Seeds[i]
		b.Segments = make([]Segment, len(a.Segments))
		for j, s := range a.Segments {
			s.Factors = v.Factors[i][j]
			b.Segments[j] = s
		}
		out[i] = &b
	}
	return out, nil
}
