package main

import (
	"errors"
	"reflect"
	"testing"

	"github.com/distopt/distopt/optimizer/cpu"

	"github.com/distopt/distopt/optimizer/backend"
	"github.com/distopt/distopt/optimizer/gpu"
)

// TestTimedBackendKeepsInterfaces checks that the timing wrapper given to
// the optimizer implements exactly the optional backend interfaces of the
// backend it wraps, GPU and CPU (the optimizer finds them by type
// assertion; a wrapper that hid them made the example time slower
// fallbacks: statistics bucket by bucket, scales read back by the host).
func TestTimedBackendKeepsInterfaces(t *testing.T) {
	optional := []reflect.Type{
		reflect.TypeFor[backend.AsyncReader](),
		reflect.TypeFor[backend.DeviceScaler](),
		reflect.TypeFor[backend.DelayedScaler](),
		reflect.TypeFor[backend.GradAccumulator](),
		reflect.TypeFor[backend.GradStatsPlanner](),
		reflect.TypeFor[backend.OnDevice](),
		reflect.TypeFor[backend.DeviceOrderer](),
		reflect.TypeFor[backend.ShardUpdater](),
		reflect.TypeFor[backend.UpdatePlanner](),
	}
	for _, tc := range []struct {
		name string
		be   backend.Backend
		min  int // optional interfaces the backend implements at least
	}{
		{"gpu", &gpu.Backend{}, 8}, // never used: only its method set matters
		{"cpu", cpu.New(1), 3},
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

// countingBackend counts the Update and Cast calls that reach it.
type countingBackend struct {
	backend.Backend
	updates, casts, syncs int
}

func (c *countingBackend) Update(*backend.UpdateArgs) error { c.updates++; return nil }
func (c *countingBackend) Cast(*backend.CastArgs) error     { c.casts++; return nil }
func (c *countingBackend) Sync() error                      { c.syncs++; return nil }
func (c *countingBackend) UpdateShards(as []*backend.UpdateArgs) error {
	c.updates += len(as)
	return nil
}
func (c *countingBackend) CastShards(cs []*backend.CastArgs) error { c.casts += len(cs); return nil }

// TestTimedBackendRoutes checks that the wrappers' Update and Cast go
// through phaseSync (which waits when On is set) rather than straight to
// the embedded backend's promoted methods.
func TestTimedBackendRoutes(t *testing.T) {
	for _, name := range []string{"gpu", "cpu"} {
		c := &countingBackend{}
		s := &phaseSync{Backend: c, On: true, Updates: 2}
		var be backend.Backend = phaseSyncCPU{sync: s}
		if name == "gpu" {
			be = phaseSyncGPU{sync: s}
		}
		for range 2 {
			if err := be.Update(nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := be.Cast(nil); err != nil {
			t.Fatal(err)
		}
		if c.updates != 2 || c.casts != 1 || c.syncs != 3 || s.updates != 2 {
			t.Errorf("%s: %d updates, %d casts, %d syncs reached the backend, %d updates counted by phaseSync; want 2, 1, 3 (a wait after each) and 2",
				name, c.updates, c.casts, c.syncs, s.updates)
		}
		// the same through the ShardUpdater methods: one call per phase,
		// a wait after each, and the update phase complete after one call
		su := be.(backend.ShardUpdater)
		s.updates = 0
		if err := errors.Join(su.UpdateShards(make([]*backend.UpdateArgs, 2)), su.CastShards(make([]*backend.CastArgs, 3))); err != nil {
			t.Fatal(err)
		}
		if c.updates != 4 || c.casts != 4 || c.syncs != 5 || s.updates != 2 {
			t.Errorf("%s shards: %d updates, %d casts, %d syncs reached the backend, %d updates counted; want 4, 4, 5 and 2",
				name, c.updates, c.casts, c.syncs, s.updates)
		}
	}
	if err := (&phaseSync{Backend: backend.Backend(nil)}).updateShards(nil); err == nil {
		t.Error("updateShards over a backend that is no ShardUpdater: no error")
	}
}
