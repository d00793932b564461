package nccl_test

import (
	"context"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
)

// TestPrecedes checks Work.Precedes against the order groups are started
// in (a group with nothing to do precedes any; and its refusals: the same
// group, a group that failed in Start, another communicator's, a nil work,
// a group with nothing to do as the later one), and what callers rely on it for: a
// stream that waited for the newest of several groups sees the results of
// the older ones; and that once the newest has been waited for, the older
// ones' Waits return without a look at the device. The oldest group is a
// large all-reduce (a copy on one rank), the newest a tiny one: a stream
// that overtook the large one would read zeros.
func TestPrecedes(t *testing.T) {
	devs := gpus(t, 1)
	d := devs[0]
	compute := newStream(t, d)
	c := group(t, devs, nccl.Config{Compute: cudalink.PublicStream(compute), OneRankCopies: true})[0]
	other := group(t, devs, nccl.Config{OneRankCopies: true})[0]
	bigSrc, bigDst, got := threes(t, d, compute, 32<<20)
	small := zeroed(t, d, compute, 256)
	ws := c.StartEach(sumGroup(bigDst, bigSrc), hostGroup(), sumGroup(small, small), nil)
	last := c.Start(sumGroup(small, small)...)
	ow := other.Start(sumGroup(small, small)...)

	// the reader: a stream that waits for the newest group only
	reader := newStream(t, d)
	if err := last.(*nccl.Work).StreamWait(cudalink.PublicStream(reader)); err != nil {
		t.Fatal(err)
	}
	if err := reader.CopyDtoH(got, cuda.DevicePtr(bigDst.Ptr)); err != nil {
		t.Fatal(err)
	}
	if err := reader.Synchronize(); err != nil {
		t.Fatal(err)
	}
	allThrees(t, got, "after a wait for the newest group, the oldest group's result")

	first, failed, third, empty := ws[0].(*nccl.Work), ws[1].(*nccl.Work), ws[2].(*nccl.Work), ws[3].(*nccl.Work)
	for _, c := range []struct {
		name string
		w    *nccl.Work
		o    collective.Work
		want bool
	}{
		{"first before the newest", first, last, true},
		{"first before the third", first, third, true},
		{"third before the newest", third, last, true},
		{"the newest before the first", last.(*nccl.Work), first, false},
		{"a group before itself", third, third, false},
		{"a group that failed in Start", failed, last, false},
		{"before a group that failed in Start", first, failed, false},
		{"before another communicator's group", first, ow, false},
		{"another communicator's group first", ow.(*nccl.Work), last, false},
		{"before nil", first, nil, false},
		{"a group with nothing to do", empty, last, true},
		{"before a group with nothing to do", first, empty, false},
	} {
		if got := c.w.Precedes(c.o); got != c.want {
			t.Errorf("%s: Precedes %t, want %t", c.name, got, c.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, w := range []collective.Work{ow, last} { // ow first: its issuer is quiet below
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// the newest group seen complete: the older ones' Waits look at nothing
	hops := d.Hops()
	for i, w := range ws {
		if err := w.Wait(ctx); (err == nil) != (i != 1) {
			t.Errorf("group %d: Wait %v", i, err) // the failed group's error is TestStartEach's subject
		}
	}
	if n := d.Hops() - hops; n != 0 {
		t.Errorf("the Waits of groups older than one seen complete made %d hand-overs to the device's worker, want 0", n)
	}
}
