package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dim3 is a grid or block shape. A zero field counts as 1.
type Dim3 struct{ X, Y, Z uint32 }

// norm returns d with zero fields replaced by 1.
func (d Dim3) norm() Dim3 {
	return Dim3{max(d.X, 1), max(d.Y, 1), max(d.Z, 1)}
}

// Args packs kernel arguments in the order of the kernel's parameters, each
// at its exact size (4 bytes for U32, I32 and F32; 8 for U64, I64, F64 and
// Ptr). The zero value is an empty list. Methods return a for chaining.
type Args struct {
	buf     []byte
	offsets []int
}

// put appends the size bytes of v (little endian), aligned to size.
func (a *Args) put(v uint64, size int) *Args {
	off := (len(a.buf) + size - 1) / size * size
	a.buf = append(a.buf, make([]byte, off+size-len(a.buf))...)
	switch size {
	case 4:
		binary.LittleEndian.PutUint32(a.buf[off:], uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(a.buf[off:], v)
	}
	a.offsets = append(a.offsets, off)
	return a
}

// U32 appends an unsigned int parameter.
func (a *Args) U32(v uint32) *Args { return a.put(uint64(v), 4) }

// I32 appends an int parameter.
func (a *Args) I32(v int32) *Args { return a.put(uint64(uint32(v)), 4) }

// U64 appends an unsigned long long (or size_t) parameter.
func (a *Args) U64(v uint64) *Args { return a.put(v, 8) }

// I64 appends a long long parameter.
func (a *Args) I64(v int64) *Args { return a.put(uint64(v), 8) }

// F32 appends a float parameter.
func (a *Args) F32(v float32) *Args { return a.put(uint64(math.Float32bits(v)), 4) }

// F64 appends a double parameter.
func (a *Args) F64(v float64) *Args { return a.put(math.Float64bits(v), 8) }

// Ptr appends a pointer parameter (any T* in device memory).
func (a *Args) Ptr(p DevicePtr) *Args { return a.put(uint64(p), 8) }

// Len returns the number of parameters.
func (a *Args) Len() int { return len(a.offsets) }

// Reset empties the list, keeping its memory.
func (a *Args) Reset() { a.buf, a.offsets = a.buf[:0], a.offsets[:0] }

// Launch queues kernel f on s with grid × block threads, shmem bytes of
// dynamic shared memory and the parameters in args (nil for none). The
// parameters must match the kernel's in number, order and size; the driver
// cannot check them. Launch errors (bad shape, too much shared memory) come
// back at once; faults inside the kernel surface at the next
// synchronization.
func (s *Stream) Launch(f *Function, grid, block Dim3, shmem int, args *Args) error {
	if f.m.d != s.d {
		panic(fmt.Sprintf("cuda: Launch of %s on a stream of another device", f.name))
	}
	if args == nil {
		args = &Args{}
	}
	return s.d.Do(func() error {
		if err := check("cuLaunchKernel", cuLaunchKernel(f.h, grid.norm(), block.norm(), shmem, s.h, args)); err != nil {
			err.(*Error).Detail = f.name
			return err
		}
		return nil
	})
}
