package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/nccl"
	"github.com/distopt/distopt/internal/cuda"
	inccl "github.com/distopt/distopt/internal/nccl"
)

// ExampleJoin is the body of a program started with `distopt run
// --nproc-per-node 2 -- PROGRAM`: each rank joins through the environment,
// all-reduces 1024 float32 values in place on its GPU, and leaves after a
// barrier. Without a GPU or NCCL it says so, as a program falling back on a
// CPU backend would.
func ExampleJoin() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := nccl.Join(ctx, nccl.Config{})
	switch {
	case errors.Is(err, cuda.ErrNoDriver), errors.Is(err, cuda.ErrNoDevice), errors.Is(err, inccl.ErrNoLibrary):
		fmt.Println("no GPU or no NCCL:", err)
		return
	case err != nil:
		fmt.Println(err)
		return
	}
	defer c.Close()
	d := c.Device()
	p, err := d.Alloc(4 * 1024)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Free(p)
	buf := buffer.DeviceBuffer{Ptr: uintptr(p), Size: 4 * 1024, Device: d.Ordinal()}
	w := c.Start(collective.Op{Kind: collective.OpAllReduce, Dst: buf, Src: buf, DType: buffer.Float32, Reduce: collective.Sum})
	if err := w.Wait(ctx); err != nil {
		fmt.Println(err) // a *collective.RankError; the communicator is aborted
		return
	}
	if err := collective.Barrier(ctx, c); err != nil {
		fmt.Println(err)
	}
}
