package buffer_test

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
)

// A buffer of four float32 elements, and a view of its second half.
func Example() {
	b := buffer.HostBuffer(make([]byte, 4*buffer.Float32.Size()))
	half := b.Slice(b.Len()/2, b.Len())
	fmt.Println(b.Memory(), b.Len(), half.Len())

	d := buffer.DeviceBuffer{Ptr: 0x1000, Size: 16, Device: 1}
	fmt.Printf("%s %#x %d\n", d.Memory(), d.Slice(8, 16).(buffer.DeviceBuffer).Ptr, d.Slice(8, 16).Len())
	// Output:
	// host 16 8
	// device 0x1008 8
}
