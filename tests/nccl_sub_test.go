package tests

// NCCL sub-communicators (nccl.NewSub) on two GPUs, one process per rank,
// with the harness of nccl_processes_test.go. NOT YET RUN: written without
// a GPU; scripts/gpu/nccl.sh runs it with the other tests of this package.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/collectivetest"
	"github.com/distopt/distopt/collective/hier"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/collective/nccl/nccltest"
	"github.com/distopt/distopt/internal/cudalink"
)

// TestNCCLSub: the conformance checks on a sub-communicator of both ranks
// in reverse order (rank i of it is rank 1-i of the job), then 2 groups x
// 1 rank of collective/hier built from sub-communicators (a group of one,
// and the cross-group of both): the reduce-scatter sums over both ranks.
func TestNCCLSub(t *testing.T) {
	requireTwoGPUs(t)
	procs := startRanks(t, "sub")
	for r, p := range procs {
		if err := waitProc(p, 5*time.Minute); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for r, p := range procs {
		if !strings.Contains(p.output(), "WORKER-OK") {
			t.Errorf("rank %d did not finish its checks", r)
		}
	}
}

// workerSub is one rank of TestNCCLSub.
func workerSub(ctx context.Context, t *testing.T) {
	rc, dev, store, bufs := ncclWorker(ctx, t)
	cfg := nccl.Config{Store: store, Device: cudalink.PublicDevice(dev), ExactAvg: true}

	rev, err := nccl.NewSub(ctx, cfg, []int{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	if rev.Rank() != 1-rc.Rank || rev.Size() != 2 {
		t.Errorf("rank %d of the job is rank %d of %d of the reversed sub-communicator", rc.Rank, rev.Rank(), rev.Size())
	}
	opts := bufs.Options(collectivetest.Options{LargeBytes: 4 << 20, Timeout: 2 * time.Minute})
	err = errors.Join(collectivetest.RunRank(ctx, rev, 9, opts), rev.Close())
	if err != nil {
		t.Fatalf("reversed sub-communicator: %v", err)
	}

	if err := hierOnGPUs(ctx, cfg, bufs, rc.Rank); err != nil {
		t.Fatal(err)
	}
	if err := store.Barrier(ctx, "sub/done"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("WORKER-OK")
}

// hierOnGPUs reduce-scatters (r+1)·[1 2 3 4] through 2 groups x 1 of
// collective/hier on NCCL sub-communicators and wants 3·[1 2 3 4].
func hierOnGPUs(ctx context.Context, cfg nccl.Config, bufs *nccltest.Buffers, r int) error {
	group, cross, err := hier.Layout(2, 1, r)
	if err != nil {
		return err
	}
	gc, err := nccl.NewSub(ctx, cfg, group)
	if err != nil {
		return err
	}
	cc, err := nccl.NewSub(ctx, cfg, cross)
	if err != nil {
		return errors.Join(err, gc.Close())
	}
	h, err := hier.New(gc, cc)
	if err != nil {
		return errors.Join(err, gc.Close(), cc.Close())
	}
	defer h.Close()
	buf, err := bufs.Alloc(cfg.Device.Ordinal(), 16)
	if err != nil {
		return err
	}
	defer bufs.Free(buf)
	in := make([]byte, 16)
	for i := range 4 {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32((r+1)*(i+1))))
	}
	if err := bufs.Upload(buf, in); err != nil {
		return err
	}
	if err := collective.ReduceScatter(ctx, h, buf, buf, buffer.Float32, collective.Sum); err != nil {
		return err
	}
	out := make([]byte, 16)
	if err := bufs.Download(buf, out); err != nil {
		return err
	}
	for i := range 4 {
		if got, want := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])), float32(3*(i+1)); got != want {
			return fmt.Errorf("hierarchical 2 x 1 on NCCL: element %d = %v, want %v", i, got, want)
		}
	}
	return nil
}
