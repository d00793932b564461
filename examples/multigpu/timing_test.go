package main

import (
	"reflect"
	"testing"

	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
)

// TestTimedBackendKeepsInterfaces checks that the timing wrapper given to
// the optimizer implements exactly the optional backend interfaces of the
// backend it wraps, GPU and CPU (the optimizer finds them by type
// assertion; a wrapper that hid them made the example time slower
// fallbacks: statistics bucket by bucket, scales read back by the host).
func TestTimedBackendKeepsInterfaces(t *testing.T) {
	optional := []reflect.Type{
		reflect.TypeFor[optimizer.AsyncReader](),
		reflect.TypeFor[optimizer.DeviceScaler](),
		reflect.TypeFor[optimizer.DelayedScaler](),
		reflect.TypeFor[optimizer.GradAccumulator](),
		reflect.TypeFor[optimizer.GradStatsPlanner](),
		reflect.TypeFor[optimizer.OnDevice](),
		reflect.TypeFor[optimizer.DeviceOrderer](),
	}
	for _, tc := range []struct {
		name string
		be   optimizer.Backend
		min  int // optional interfaces the backend implements at least
	}{
		{"gpu", &gpu.Backend{}, 6}, // never used: only its method set matters
		{"cpu", optimizer.NewCPU(1), 1},
	} {
		wrapped := timedBackend(&phaseSync{Backend: tc.be})
		if _, plain := wrapped.(*phaseSync); plain {
			t.Errorf("%s: the backend is wrapped as %T, which hides its optional interfaces", tc.name, wrapped)
		}
		n := 0
		for _, it := range optional {
			has, got := reflect.TypeOf(tc.be).Implements(it), reflect.TypeOf(wrapped).Implements(it)
			if has {
				n++
			}
			if has != got {
				t.Errorf("%s: %T implements %v: %t; the backend %T: %t", tc.name, wrapped, it, got, tc.be, has)
			}
		}
		if n < tc.min {
			t.Errorf("%s: the backend implements %d of the optional interfaces, want at least %d: is the list here out of date?", tc.name, n, tc.min)
		}
	}
}
