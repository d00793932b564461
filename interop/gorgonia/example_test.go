//go:build gorgonia

package cuinterop_test

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective/single"
	cuinterop "github.com/distopt/distopt/interop/gorgonia"
	"github.com/distopt/distopt/optimizer"
	"github.com/distopt/distopt/optimizer/gpu"
	"gorgonia.org/cu"
)

// A gorgonia program trains with distopt on one GPU: it writes each
// gradient on a stream of its own, orders distopt's stream after it, steps,
// and reads the FP8 weights back as cu.DevicePtr. (Compiled, not run: it
// needs a GPU.)
func Example() {
	ctx := context.Background()
	b, err := gpu.New(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	// A one-rank communicator on device memory, copying with gorgonia.
	copier := func(dst, src buffer.Buffer) error {
		d, _ := cuinterop.DevicePtr(dst)
		s, _ := cuinterop.DevicePtr(src)
		return cuinterop.Do(b, func() error {
			return cu.MemcpyDtoDAsync(d, s, int64(min(dst.Len(), src.Len())), cuinterop.ToStream(b.Stream().Handle()))
		})
	}
	params := []optimizer.Param{{Name: "w", Shape: []int{64, 64}}}
	o, err := optimizer.New(ctx, single.New(buffer.Device, copier), b, params, optimizer.FromMap(map[string][]float32{"w": make([]float32, 64*64)}), optimizer.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Close()

	grad, _ := o.Grad("w") // bfloat16 by default
	dst, n, _ := cuinterop.GradPtr(grad)
	var s cu.Stream
	err = cuinterop.Do(b, func() (err error) {
		// In the primary context, as distopt: memory is shared.
		if s, err = cu.MakeStream(cu.NonBlocking); err != nil {
			return err
		}
		// The backward pass would write here; a memset stands in for it.
		return cu.MemsetD16Async(dst, 0x3f80, n/2, s) // 1.0 in bfloat16
	})
	if err == nil {
		err = cuinterop.BackendWait(b, s) // Step's reads wait for s
	}
	if err == nil {
		_, err = o.Step(ctx)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	w, _ := o.Param("w")
	p, n, _ := cuinterop.ParamPtr(w) // final when Step returns
	fp8 := make([]byte, n)
	cuinterop.Do(b, func() error {
		cu.MemcpyDtoH(unsafe.Pointer(&fp8[0]), p, n)
		return s.Destroy()
	})
	fmt.Printf("%d FP8 bytes (%v)\n", len(fp8), w.Format)
}

// A buffer allocated by gorgonia, in the primary context, handed to distopt.
func ExampleFromDevicePtr() {
	b, err := gpu.New(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	var p cu.DevicePtr
	if err := cuinterop.Do(b, func() (err error) { p, err = cu.MemAlloc(1024); return err }); err != nil {
		fmt.Println(err)
		return
	}
	defer cuinterop.Do(b, func() error { return cu.MemFree(p) })
	buf := cuinterop.FromDevicePtr(p, 1024, cu.Device(b.Ordinal()))
	err = b.Write(buf, 0, []byte("written by distopt, read by gorgonia"))
	fmt.Println(buf.Len(), err)
}
