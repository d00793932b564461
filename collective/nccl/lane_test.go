package nccl_test

import (
	"context"
	"testing"
	"time"

	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
)

// TestFromWorker starts groups and waits for them from inside the
// device's worker (cuda.Device.Do), as optimizer/gpu's Batch does for a
// whole step: the communicator hands its groups to NCCL and looks at them
// from its own lane, so nothing waits for the worker that is waiting. A
// reader stream ordered after the newest group (StreamWait) sees the
// result of a large all-reduce started before it (a copy of 3s into zeros
// on one rank), and Wait returns for both groups.
func TestFromWorker(t *testing.T) {
	devs := gpus(t, 1)
	d := devs[0]
	compute := newStream(t, d)
	c := group(t, devs, nccl.Config{Compute: cudalink.PublicStream(compute), OneRankCopies: true})[0]
	src, dst, got := threes(t, d, compute, 8<<20)
	small := zeroed(t, d, compute, 256)
	reader := newStream(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := d.Do(func() error {
		first := c.Start(sumGroup(dst, src)...)
		last := c.Start(sumGroup(small, small)...)
		if err := last.(*nccl.Work).StreamWait(cudalink.PublicStream(reader)); err != nil {
			return err
		}
		if err := reader.CopyDtoH(got, cuda.DevicePtr(dst.Ptr)); err != nil {
			return err
		}
		if err := last.Wait(ctx); err != nil {
			return err
		}
		return first.Wait(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Synchronize(); err != nil {
		t.Fatal(err)
	}
	allThrees(t, got, "the all-reduce's result when the reader ran")
}
