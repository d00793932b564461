package backend

import (
	"reflect"
	"slices"
	"testing"

	"github.com/distopt/distopt/buffer"
)

// TestLaunchDiffCoversUpdateArgs checks CheckShards' and CheckCastShards'
// written-out comparisons against the structs they compare: every field of
// UpdateArgs (CastArgs) is either a shard's own
// (shardFields, castShardFields) or compared by launchDiff
// (castLaunchDiff), listed in declaration order in launchFields
// (castLaunchFields), so a new field cannot be forgotten; and the
// comparison names each compared field when only that field differs (a
// number or a struct's first field changed, a buffer of other memory).
func TestLaunchDiffCoversUpdateArgs(t *testing.T) {
	t.Run("UpdateArgs", func(t *testing.T) { checkCovers(t, shardFields, launchFields, launchDiff) })
	t.Run("CastArgs", func(t *testing.T) { checkCovers(t, castShardFields, castLaunchFields, castLaunchDiff) })
}

// checkCovers is TestLaunchDiffCoversUpdateArgs for the struct T.
func checkCovers[T any](t *testing.T, own, compared []string, diff func(a, b *T) string) {
	ty := reflect.TypeFor[T]()
	var all []string
	for i := range ty.NumField() {
		all = append(all, ty.Field(i).Name)
	}
	covered := append(slices.Clone(own), compared...)
	slices.Sort(covered)
	if sorted := slices.Sorted(slices.Values(all)); !slices.Equal(sorted, covered) {
		t.Fatalf("%v has fields %v; the lists cover %v: update the written-out comparison and its lists", ty, sorted, covered)
	}
	last := -1
	for _, name := range compared {
		f, _ := ty.FieldByName(name)
		if f.Index[0] < last {
			t.Errorf("%s out of declaration order", name)
		}
		last = f.Index[0]
		var a, b T
		fa, fb := reflect.ValueOf(&a).Elem().FieldByName(name), reflect.ValueOf(&b).Elem().FieldByName(name)
		if fa.Kind() == reflect.Interface {
			fa.Set(reflect.ValueOf(make(buffer.HostBuffer, 8)))
			fb.Set(reflect.ValueOf(make(buffer.HostBuffer, 8)))
		} else if !bump(fb) {
			t.Fatalf("%s: cannot make a differing value of kind %v", name, fb.Kind())
		}
		if got := diff(&a, &b); got != name {
			t.Errorf("only %s differs: the comparison says %q", name, got)
		}
		if got := diff(&a, &a); got != "" {
			t.Errorf("%s: a shard against itself: the comparison says %q", name, got)
		}
	}
}

// bump changes v (a number, a bool, or a struct through its first field
// that bump can change) and reports whether it could.
func bump(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Struct:
		for i := range v.NumField() {
			if bump(v.Field(i)) {
				return true
			}
		}
		return false
	default:
		return false
	}
	return true
}
