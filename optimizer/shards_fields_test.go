package optimizer

import (
	"reflect"
	"slices"
	"testing"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/optimizer/backend"
)

// TestLaunchDiffCoversUpdateArgs checks CheckShards' written-out
// comparison against the struct it compares: every field of
// backend.UpdateArgs is either a shard's own (shardFields) or compared by
// launchDiff (launchFields, in declaration order), so a new field cannot be
// forgotten; and launchDiff names each compared field when only that field
// differs (a number or a struct's first field changed, a buffer of other
// memory).
func TestLaunchDiffCoversUpdateArgs(t *testing.T) {
	ty := reflect.TypeFor[backend.UpdateArgs]()
	var all, covered []string
	for i := range ty.NumField() {
		all = append(all, ty.Field(i).Name)
	}
	covered = append(slices.Clone(shardFields), launchFields...)
	slices.Sort(covered)
	if sorted := slices.Sorted(slices.Values(all)); !slices.Equal(sorted, covered) {
		t.Fatalf("backend.UpdateArgs has fields %v; shardFields and launchFields cover %v: update CheckShards (launchDiff) and the lists", sorted, covered)
	}
	last := -1
	for _, name := range launchFields {
		f, _ := ty.FieldByName(name)
		if f.Index[0] < last {
			t.Errorf("launchFields: %s out of declaration order", name)
		}
		last = f.Index[0]
		var a, b backend.UpdateArgs
		fa, fb := reflect.ValueOf(&a).Elem().FieldByName(name), reflect.ValueOf(&b).Elem().FieldByName(name)
		if fa.Kind() == reflect.Interface {
			fa.Set(reflect.ValueOf(make(collective.HostBuffer, 8)))
			fb.Set(reflect.ValueOf(make(collective.HostBuffer, 8)))
		} else if !bump(fb) {
			t.Fatalf("%s: cannot make a differing value of kind %v", name, fb.Kind())
		}
		if got := launchDiff(&a, &b); got != name {
			t.Errorf("only %s differs: launchDiff says %q", name, got)
		}
		if got := launchDiff(&a, &a); got != "" {
			t.Errorf("%s: a shard against itself: launchDiff says %q", name, got)
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
