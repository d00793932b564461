//go:build linux

package cuda_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distopt/distopt/internal/cuda/cudatest"
)

// TestHops checks the count of hand-overs to the worker (one per Do from
// another goroutine, none for a call made inside Do) and that Do keeps its
// contract (fn's error, a panic raised again, calls in order) whether the
// two sides poll (SetHopSpin) or sleep.
func TestHops(t *testing.T) {
	d := cudatest.Require(t)
	for _, spin := range []time.Duration{0, 50 * time.Microsecond} {
		t.Run(fmt.Sprint(spin), func(t *testing.T) {
			d.SetHopSpin(spin)
			defer d.SetHopSpin(0)
			before := d.Hops()
			var order []int
			for i := range 100 {
				if err := d.Do(func() error { order = append(order, i); return nil }); err != nil {
					t.Fatal(err)
				}
			}
			for i, v := range order {
				if v != i {
					t.Fatalf("call %d ran as the %dth", v, i)
				}
			}
			errBoom := errors.New("boom")
			err := d.Do(func() error {
				return d.Do(func() error { return errBoom }) // on the worker: no hop
			})
			if !errors.Is(err, errBoom) {
				t.Errorf("Do returned %v, want fn's error", err)
			}
			if n := d.Hops() - before; n != 101 {
				t.Errorf("%d hops for 101 calls from outside the worker", n)
			}
			func() {
				defer func() {
					if r := recover(); r != "raised" {
						t.Errorf("recovered %v, want fn's panic", r)
					}
				}()
				d.Do(func() error { panic("raised") })
			}()
		})
	}
}

// BenchmarkHop measures one hand-over to the worker and back (Do of an
// empty function), with each side sleeping at once (spin 0) or polling
// first, for calls in a row with gap of the host's own work between them
// (a busy wait: Go code between two calls of a step): hop-us is the
// round trip.
func BenchmarkHop(b *testing.B) {
	d := cudatest.Require(b)
	for _, gap := range []time.Duration{0, 5 * time.Microsecond} {
		for _, spin := range []time.Duration{0, 5 * time.Microsecond, 20 * time.Microsecond, 100 * time.Microsecond} {
			b.Run(fmt.Sprintf("gap=%v/spin=%v", gap, spin), func(b *testing.B) {
				d.SetHopSpin(spin)
				defer d.SetHopSpin(0)
				nop := func() error { return nil }
				var hop time.Duration
				n := 0
				for b.Loop() {
					t0 := time.Now()
					if err := d.Do(nop); err != nil {
						b.Fatal(err)
					}
					hop += time.Since(t0)
					n++
					for t1 := time.Now(); time.Since(t1) < gap; {
					}
				}
				b.ReportMetric(float64(hop.Nanoseconds())/1e3/float64(n), "hop-us")
			})
		}
	}
}
