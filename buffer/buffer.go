package buffer

import "fmt"

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

// Buffer is memory that an operation reads or writes. A consumer states
// which Memory kinds it accepts; collectives reject the others with an error.
type Buffer interface {
	// Len is the size in bytes.
	Len() int
	// Memory is where the bytes live.
	Memory() MemoryKind
	// Slice returns bytes [lo, hi) of the buffer, sharing its memory and
	// of the same kind. It panics when the range is out of bounds.
	Slice(lo, hi int) Buffer
}

// HostBuffer is host memory. The caller owns it; an operation given it
// reads or writes it only until the operation completes.
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
		panic(fmt.Sprintf("buffer: device slice [%d:%d] out of range of %d bytes", lo, hi, b.Size))
	}
	return DeviceBuffer{Ptr: b.Ptr + uintptr(lo), Size: hi - lo, Device: b.Device}
}
