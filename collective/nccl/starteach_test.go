package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cudalink"
)

// TestStartEach checks StartEach on one GPU with a compute stream: three
// groups started with one call after fills of their sources queued on the
// compute stream see the fills (the one wait recorded for all of them goes
// to the first group with work, after an empty and an invalid one, and
// orders the later ones through it), the empty group completes at once, the
// invalid one fails alone, and each Work is its own group's.
func TestStartEach(t *testing.T) {
	devs := gpus(t, 1)
	d := devs[0]
	compute := newStream(t, d)
	c := group(t, devs, nccl.Config{Compute: cudalink.PublicStream(compute), OneRankCopies: true})[0]
	const words = 16 << 20
	var srcs, dsts []buffer.DeviceBuffer
	for range 3 {
		srcs, dsts = append(srcs, zeroed(t, d, compute, words)), append(dsts, zeroed(t, d, compute, words))
	}
	if err := compute.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for k, s := range srcs {
		for range 4 { // four fills, so that a group that did not wait would overtake them
			if err := compute.Memset32(cuda.DevicePtr(s.Ptr), math.Float32bits(float32(k+1)), words); err != nil {
				t.Fatal(err)
			}
		}
	}
	sum := func(k int) []collective.Op { return sumGroup(dsts[k], srcs[k]) }
	bad := hostGroup()
	// the first groups have no work (empty, invalid): the wait for the
	// compute stream must go to the first group that has
	ws := c.StartEach(nil, bad, sum(0), sum(1), sum(2))
	if len(ws) != 5 {
		t.Fatalf("%d works for 5 groups", len(ws))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, w := range ws {
		err := w.Wait(ctx)
		if i == 1 {
			if !errors.Is(err, collective.ErrMemoryKind) {
				t.Errorf("the group of host buffers: error %v, want ErrMemoryKind", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("group %d: %v", i, err)
		}
	}
	for k, dst := range dsts {
		got := make([]float32, words)
		if err := compute.Download(cuda.Bytes(got), cuda.DevicePtr(dst.Ptr)); err != nil {
			t.Fatal(err)
		}
		if err := firstOther(got, float32(k+1)); err != nil {
			t.Errorf("group of buffer %d: %v", k, err)
		}
	}
}

// firstOther returns an error naming the first element of xs that is not
// want, or nil.
func firstOther(xs []float32, want float32) error {
	for i, v := range xs {
		if v != want {
			return fmt.Errorf("element %d is %v, want %v", i, v, want)
		}
	}
	return nil
}
