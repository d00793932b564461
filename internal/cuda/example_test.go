package cuda_test

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
)

// Example uploads a few numbers, doubles them on the GPU with a kernel given
// as PTX, and reads them back. On a host without a GPU it says so and stops,
// as a caller falling back to the CPU would.
func Example() {
	d, err := cuda.Open(0)
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		fmt.Println("no GPU; falling back to the CPU")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	const ptx = `.version 7.8
.target sm_80
.address_size 64
.visible .entry twice(.param .u64 p, .param .u32 n) {
	.reg .pred %q; .reg .b32 %r<4>; .reg .f32 %f; .reg .b64 %a<3>;
	mov.u32 %r1, %tid.x; ld.param.u32 %r2, [n]; setp.ge.u32 %q, %r1, %r2; @%q ret;
	ld.param.u64 %a1, [p]; cvta.to.global.u64 %a1, %a1; mul.wide.u32 %a2, %r1, 4; add.s64 %a1, %a1, %a2;
	ld.global.f32 %f, [%a1]; add.f32 %f, %f, %f; st.global.f32 [%a1], %f; ret;
}`
	m, err := d.LoadModule([]byte(ptx))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Unload()
	twice, _ := m.Function("twice")
	s, _ := d.NewStream()
	defer s.Destroy()

	x := []float32{1, 2.5, -3}
	p, _ := d.Alloc(4 * len(x))
	defer d.Free(p)
	s.Upload(p, cuda.Bytes(x))
	s.Launch(twice, cuda.Dim3{X: 1}, cuda.Dim3{X: 32}, 0, new(cuda.Args).Ptr(p).U32(uint32(len(x))))
	s.Download(cuda.Bytes(x), p)
	fmt.Println(x)
}

// ExampleArgs packs the parameters of a kernel declared as
// k(float *dst, const float *src, unsigned long long n, float scale).
func ExampleArgs() {
	var dst, src cuda.DevicePtr // from Device.Alloc
	args := new(cuda.Args).Ptr(dst).Ptr(src).U64(1 << 20).F32(0.5)
	fmt.Println(args.Len())
	// Output: 4
}

// ExampleDevice_NewLane drives the device from a thread of its own beside
// the worker: the lane queues work that a stream of the worker waits for,
// while the worker itself is blocked in that stream's Synchronize. Without
// a GPU it says so and stops.
func ExampleDevice_NewLane() {
	d, err := cuda.Open(0)
	if err != nil {
		fmt.Println("no GPU")
		return
	}
	defer d.Close()
	lane, err := d.NewLane()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lane.Close()
	waiter, _ := d.NewStream()
	defer waiter.Destroy()
	writer, _ := d.NewStream()
	defer writer.Destroy()
	flag, _ := d.Alloc(4)
	defer d.Free(flag)
	writer.Memset32(flag, 0, 1)
	writer.Synchronize()
	waiter.WaitValue32(flag, 1)
	done := make(chan error)
	go func() { done <- waiter.Synchronize() }() // the worker waits for the word
	lane.Do(func() error { return writer.WriteValue32(flag, 1) })
	fmt.Println(<-done)
}

// A module shipped as PTX and machine code for sm_80 and sm_90: the cubin
// LoadCode would load on each GPU (none: the driver JIT-compiles the PTX).
func ExampleCode_CubinFor() {
	c := cuda.Code{Name: "update_sm80", PTX: []byte("..."), Cubins: map[int][]byte{80: nil, 90: nil}}
	for _, gpu := range []cuda.DeviceInfo{{Name: "A100", Major: 8}, {Name: "L40S", Major: 8, Minor: 9},
		{Name: "H200", Major: 9}, {Name: "B200", Major: 10}} {
		if arch, ok := c.CubinFor(gpu); ok {
			fmt.Printf("%s: sm_%d cubin\n", gpu.Name, arch)
		} else {
			fmt.Printf("%s: PTX\n", gpu.Name)
		}
	}
	// Output:
	// A100: sm_80 cubin
	// L40S: sm_80 cubin
	// H200: sm_90 cubin
	// B200: PTX
}
