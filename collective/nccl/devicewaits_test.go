package nccl_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/internal/cuda"
)

// TestDeviceWaits checks Config.DeviceWaits on one GPU (one-rank
// communicators whose all-reduces run through NCCL). With the
// communicator's lane held, so that no group is handed to NCCL:
// StreamWait returns without waiting for the group to be handed over, the
// reader stream ordered after it does not run, Precedes holds for the
// older group already; once the lane is free the reader sees the group's
// result (a large all-reduce, a copy of 3s into zeros, started after a
// small one). And a group that never reaches NCCL (the communicator fails
// while it waits for the lane) releases the stream waiting for it: the
// reader completes, and Wait reports the failure.
func TestDeviceWaits(t *testing.T) {
	devs := gpus(t, 1)
	d := devs[0]
	compute := newStream(t, d)
	cfg := nccl.Config{Compute: compute, OneRankCopies: true, DeviceWaits: true}
	c := group(t, devs, cfg)[0]
	const big = 8 << 20
	src, dst, small := zeroed(t, d, compute, big), zeroed(t, d, compute, big), zeroed(t, d, compute, 256)
	if err := compute.Memset32(cuda.DevicePtr(src.Ptr), math.Float32bits(3), big); err != nil {
		t.Fatal(err)
	}
	host, err := d.AllocHost(4 * big)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Free() })
	got := host.Bytes()

	release := nccl.HoldLane(c)
	older := c.Start(sumGroup(small, small)...).(*nccl.Work)
	w := c.Start(sumGroup(dst, src)...).(*nccl.Work)
	reader := newStream(t, d)
	err = w.StreamWait(reader)
	issued := nccl.Issued(w)
	precedes := older.Precedes(w)
	cerr := reader.CopyDtoH(got, cuda.DevicePtr(dst.Ptr))
	ran, qerr := reader.Query()
	release(false)
	if err := errors.Join(err, cerr, qerr); err != nil {
		t.Fatal(err)
	}
	if issued {
		t.Error("StreamWait returned after the group was handed to NCCL, with the lane held")
	}
	if ran {
		t.Error("the reader ran before the group it waits for was handed to NCCL")
	}
	if !precedes {
		t.Error("Precedes: the older group does not precede one not handed over yet")
	}
	if err := reader.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := range big {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != 3 {
			t.Fatalf("element %d of the group's result is %g when the reader ran, want 3", i, v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, w := range []*nccl.Work{w, older} {
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// a failure while a stream waits for a group not handed over
	c2 := group(t, devs, cfg)[0]
	release = nccl.HoldLane(c2)
	w2 := c2.Start(sumGroup(small, small)...).(*nccl.Work)
	reader2 := newStream(t, d)
	err = w2.StreamWait(reader2)
	release(true)
	if err != nil {
		t.Fatalf("StreamWait: %v", err)
	}
	synced := make(chan error, 1)
	go func() { synced <- reader2.Synchronize() }()
	select {
	case err := <-synced:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a guard against a hang, not a measurement
		t.Fatal("a stream waiting for a group that failed before NCCL was not released")
	}
	if err := w2.Wait(ctx); !errors.Is(err, collective.ErrAborted) {
		t.Errorf("Wait of the group that failed: %v, want ErrAborted", err)
	}
}
