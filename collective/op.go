package collective

import (
	"fmt"
	"unsafe"

	"github.com/distopt/distopt/buffer"
)

// OpKind names an operation.
type OpKind uint8

const (
	// OpAllGather: Src holds n bytes on every rank; Dst holds Size()*n bytes,
	// rank r's Src at offset r*n on every rank. In place is allowed: Src may
	// be exactly the rank's own slice of Dst.
	OpAllGather OpKind = iota + 1
	// OpReduceScatter: Src holds Size()*n elements of DType on every rank;
	// Dst holds n elements and receives the reduction (Reduce) of the ranks'
	// slices [r*n, (r+1)*n) for its own rank r. In place is allowed: Dst may
	// be exactly the rank's own slice of Src.
	OpReduceScatter
	// OpAllReduce: Src and Dst hold the same number of elements; Dst receives
	// the reduction over ranks. Dst may equal Src.
	OpAllReduce
	// OpBroadcast: Dst on every rank receives Dst of rank Root. Src is unused.
	OpBroadcast
	// OpBarrier: completes once every rank has started it.
	OpBarrier
	// OpAllToAll: Src and Dst hold Size()*n bytes on every rank; block s of
	// rank r's Dst (bytes [s*n, (s+1)*n)) receives block r of rank s's Src.
	// Src and Dst must not overlap.
	OpAllToAll
)

func (k OpKind) String() string {
	switch k {
	case OpAllGather:
		return "all-gather"
	case OpReduceScatter:
		return "reduce-scatter"
	case OpAllReduce:
		return "all-reduce"
	case OpBroadcast:
		return "broadcast"
	case OpBarrier:
		return "barrier"
	case OpAllToAll:
		return "all-to-all"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one collective operation. Fields not used by Kind are ignored.
type Op struct {
	Kind   OpKind
	Dst    buffer.Buffer
	Src    buffer.Buffer
	DType  buffer.DType // ReduceScatter, AllReduce
	Reduce ReduceOp     // ReduceScatter, AllReduce
	Root   int          // Broadcast
	// Tag names the op across calls, for communicators that keep state
	// from one call of an op to the next: ops of one nonzero tag are the
	// same reduction repeated (collective/fp8grad keeps one error
	// feedback residual per tag). 0 is no tag. Other communicators ignore
	// it. The optimizer tags each bucket's gradient reduce-scatter
	// (optimizer.GradTag).
	Tag uint64
}

// Validate checks the op's shape against a communicator of size ranks and
// memory kind mem. It returns an error wrapping ErrInvalid or ErrMemoryKind.
func (op Op) Validate(size int, mem buffer.MemoryKind) error {
	switch op.Kind {
	case OpBarrier:
		return nil
	case OpAllGather, OpReduceScatter, OpAllReduce, OpBroadcast, OpAllToAll:
	default:
		return op.invalid("unknown op kind")
	}
	if err := op.checkMemory("dst", op.Dst, mem); err != nil {
		return err
	}
	if op.Kind != OpBroadcast {
		if err := op.checkMemory("src", op.Src, mem); err != nil {
			return err
		}
	}
	if op.Kind == OpReduceScatter || op.Kind == OpAllReduce {
		if err := op.checkReduce(); err != nil {
			return err
		}
	}
	return op.checkSizes(size)
}

// invalid returns the error of an op whose shape is wrong.
func (op Op) invalid(format string, args ...any) error {
	return fmt.Errorf("collective: %s: %s: %w", op.Kind, fmt.Sprintf(format, args...), ErrInvalid)
}

// checkMemory checks that buffer b (named name) is set and of kind mem.
func (op Op) checkMemory(name string, b buffer.Buffer, mem buffer.MemoryKind) error {
	if b == nil {
		return op.invalid("%s buffer is nil", name)
	}
	if b.Memory() != mem {
		return fmt.Errorf("collective: %s: %s buffer is %s memory, communicator takes %s: %w", op.Kind, name, b.Memory(), mem, ErrMemoryKind)
	}
	return nil
}

// checkReduce checks the element type and the reduction of a reducing op.
func (op Op) checkReduce() error {
	switch op.DType {
	case buffer.Uint8, buffer.BFloat16, buffer.Float32, buffer.Float64, buffer.Uint32, buffer.Int64:
	default:
		return op.invalid("unknown dtype %d", op.DType)
	}
	switch op.Reduce {
	case Sum, Max:
	case Avg:
		if op.DType != buffer.BFloat16 && op.DType != buffer.Float32 && op.DType != buffer.Float64 {
			return op.invalid("avg needs a floating point dtype, got %s", op.DType)
		}
	default:
		return op.invalid("unknown reduction %d", op.Reduce)
	}
	return nil
}

// checkSizes checks the buffer sizes (and the root) of an op of a known
// kind, its buffers set, on size ranks.
func (op Op) checkSizes(size int) error {
	switch op.Kind {
	case OpAllGather:
		if op.Dst.Len() != size*op.Src.Len() {
			return op.invalid("dst has %d bytes, want %d ranks x %d", op.Dst.Len(), size, op.Src.Len())
		}
	case OpReduceScatter:
		if op.Src.Len() != size*op.Dst.Len() {
			return op.invalid("src has %d bytes, want %d ranks x %d", op.Src.Len(), size, op.Dst.Len())
		}
		if op.Dst.Len()%op.DType.Size() != 0 {
			return op.invalid("dst has %d bytes, not a multiple of %s", op.Dst.Len(), op.DType)
		}
	case OpAllReduce:
		if op.Src.Len() != op.Dst.Len() {
			return op.invalid("src has %d bytes, dst %d", op.Src.Len(), op.Dst.Len())
		}
		if op.Dst.Len()%op.DType.Size() != 0 {
			return op.invalid("buffer has %d bytes, not a multiple of %s", op.Dst.Len(), op.DType)
		}
	case OpAllToAll:
		if op.Src.Len() != op.Dst.Len() {
			return op.invalid("src has %d bytes, dst %d", op.Src.Len(), op.Dst.Len())
		}
		if op.Src.Len()%size != 0 {
			return op.invalid("buffers have %d bytes, not a multiple of %d ranks", op.Src.Len(), size)
		}
		if overlap(op.Src, op.Dst) {
			return op.invalid("src and dst overlap")
		}
	case OpBroadcast:
		if op.Root < 0 || op.Root >= size {
			return op.invalid("root %d out of range [0, %d)", op.Root, size)
		}
	}
	return nil
}

// overlap reports whether buffers a and b share a byte (buffers of
// different kinds, or device buffers of different devices, never do).
func overlap(a, b buffer.Buffer) bool {
	if a.Len() == 0 || b.Len() == 0 {
		return false
	}
	var pa, pb uintptr
	switch x := a.(type) {
	case buffer.HostBuffer:
		y, ok := b.(buffer.HostBuffer)
		if !ok {
			return false
		}
		pa, pb = uintptr(unsafe.Pointer(unsafe.SliceData(x))), uintptr(unsafe.Pointer(unsafe.SliceData(y)))
	case buffer.DeviceBuffer:
		y, ok := b.(buffer.DeviceBuffer)
		if !ok || x.Device != y.Device {
			return false
		}
		pa, pb = x.Ptr, y.Ptr
	default:
		return false
	}
	return pa < pb+uintptr(b.Len()) && pb < pa+uintptr(a.Len())
}
