package collective

import "fmt"

// DType is the element type of a buffer taking part in a reduction.
type DType uint8

const (
	// Uint8 is one unsigned byte; gathers and broadcasts move every type as Uint8.
	Uint8 DType = iota + 1
	// BFloat16 is bfloat16 stored little-endian in two bytes.
	BFloat16
	// Float32 is IEEE binary32, little-endian.
	Float32
	// Float64 is IEEE binary64, little-endian.
	Float64
	// Uint32 is an unsigned 32-bit integer, little-endian (amax bit patterns).
	Uint32
	// Int64 is a signed 64-bit integer, little-endian (exact fixed-point sums).
	Int64
)

// Size returns the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case Uint8:
		return 1
	case BFloat16:
		return 2
	case Float32, Uint32:
		return 4
	case Float64, Int64:
		return 8
	}
	panic(fmt.Sprintf("collective: unknown dtype %d", d))
}

func (d DType) String() string {
	switch d {
	case Uint8:
		return "uint8"
	case BFloat16:
		return "bfloat16"
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Uint32:
		return "uint32"
	case Int64:
		return "int64"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// ReduceOp is the reduction of ReduceScatter and AllReduce.
type ReduceOp uint8

const (
	// Sum adds the contributions of all ranks.
	Sum ReduceOp = iota + 1
	// Avg adds the contributions and divides by the number of ranks
	// (floating point types only).
	Avg
	// Max keeps the largest contribution.
	Max
)

func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Max:
		return "max"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(o))
}

// MemoryKind says where a buffer lives.
type MemoryKind uint8

const (
	// Host is ordinary (or pinned) CPU memory.
	Host MemoryKind = iota + 1
	// Device is GPU memory.
	Device
)

func (k MemoryKind) String() string {
	switch k {
	case Host:
		return "host"
	case Device:
		return "device"
	}
	return fmt.Sprintf("MemoryKind(%d)", uint8(k))
}

// Buffer is memory that an operation reads or writes. A backend accepts
// only buffers of its own Memory kind and reports ErrMemoryKind otherwise.
type Buffer interface {
	// Len is the size in bytes.
	Len() int
	// Memory is where the bytes live.
	Memory() MemoryKind
	// Slice returns bytes [lo, hi) of the buffer, sharing its memory and
	// of the same kind. It panics when the range is out of bounds.
	Slice(lo, hi int) Buffer
}

// HostBuffer is host memory. The caller owns it; a backend reads or writes it
// only between Start and the completion of the operation's Wait.
type HostBuffer []byte

// Len returns len(b).
func (b HostBuffer) Len() int { return len(b) }

// Memory returns Host.
func (b HostBuffer) Memory() MemoryKind { return Host }

// Slice returns b[lo:hi:hi] (a HostBuffer).
func (b HostBuffer) Slice(lo, hi int) Buffer { return b[lo:hi:hi] }

// DeviceBuffer is GPU memory: Size bytes at Ptr on GPU Device.
type DeviceBuffer struct {
	Ptr    uintptr
	Size   int
	Device int
}

// Len returns b.Size.
func (b DeviceBuffer) Len() int { return b.Size }

// Memory returns Device.
func (b DeviceBuffer) Memory() MemoryKind { return Device }

// Slice returns the bytes [lo, hi) of b (a DeviceBuffer).
func (b DeviceBuffer) Slice(lo, hi int) Buffer {
	if lo < 0 || hi < lo || hi > b.Size {
		panic(fmt.Sprintf("collective: device slice [%d:%d] out of range of %d bytes", lo, hi, b.Size))
	}
	return DeviceBuffer{Ptr: b.Ptr + uintptr(lo), Size: hi - lo, Device: b.Device}
}
