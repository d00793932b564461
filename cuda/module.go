package cuda

import (
	"fmt"

	icuda "github.com/distopt/distopt/internal/cuda"
)

// Module is code loaded on a device: PTX, compiled by the driver for the GPU.
type Module struct {
	m *icuda.Module
	d *Device
}

// Function is a kernel of a Module.
type Function struct {
	f *icuda.Function
	d *Device
}

// Dim3 is a grid or block size; a zero component counts as 1.
type Dim3 struct{ X, Y, Z uint32 }

// LoadModule loads PTX text (NUL-terminated or not), which the driver
// JIT-compiles for the device, or a cubin built for the device's
// architecture. The driver's JIT log is in the error when it fails. Unload
// releases the module.
func (d *Device) LoadModule(ptx []byte) (*Module, error) {
	m, err := d.d.LoadModule(ptx)
	if err != nil {
		return nil, err
	}
	return &Module{m: m, d: d}, nil
}

// Image says what a module was loaded from.
type Image struct {
	Cubin bool // machine code, else PTX compiled by the driver's JIT
	Arch  int  // the cubin's architecture (90 for sm_90); 0 for PTX
}

func (i Image) String() string { return icuda.Image(i).String() }

// Image says whether the module was loaded from a cubin or from PTX.
func (m *Module) Image() Image { return Image(m.m.Image()) }

// Unload releases the module and its functions.
func (m *Module) Unload() error { return m.m.Unload() }

// Function returns the kernel called name (its extern "C" name).
func (m *Module) Function(name string) (*Function, error) {
	f, err := m.m.Function(name)
	if err != nil {
		return nil, err
	}
	return &Function{f: f, d: m.d}, nil
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.f.Name() }

// SetMaxDynamicShared lets launches of f use up to n bytes of dynamic shared
// memory, beyond the default 48 KiB.
func (f *Function) SetMaxDynamicShared(n int) error {
	return f.f.SetAttribute(icuda.FuncMaxDynamicSharedSizeBytes, n)
}

// Launch enqueues f on s with grid and block sizes, shmem bytes of dynamic
// shared memory, and the kernel's arguments in order. It panics when f
// belongs to another device than s.
func (s *Stream) Launch(f *Function, grid, block Dim3, shmem int, args *Args) error {
	if f.d.d != s.s.Device() {
		panic(fmt.Sprintf("cuda: Launch of %s on a stream of another device", f.Name()))
	}
	var a icuda.Args
	if args != nil {
		a = args.a
	}
	return s.s.Launch(f.f, icuda.Dim3(grid), icuda.Dim3(block), shmem, &a)
}

// Args are a kernel's arguments, packed with the size and alignment of their
// C types. The methods append one argument and return a for chaining.
type Args struct {
	a icuda.Args
}

// Ptr appends a pointer to device memory.
func (a *Args) Ptr(p DevicePtr) *Args { a.a.Ptr(icuda.DevicePtr(p)); return a }

// I32 appends an int.
func (a *Args) I32(v int32) *Args { a.a.I32(v); return a }

// U32 appends an unsigned int.
func (a *Args) U32(v uint32) *Args { a.a.U32(v); return a }

// I64 appends a long long.
func (a *Args) I64(v int64) *Args { a.a.I64(v); return a }

// U64 appends an unsigned long long.
func (a *Args) U64(v uint64) *Args { a.a.U64(v); return a }

// F32 appends a float.
func (a *Args) F32(v float32) *Args { a.a.F32(v); return a }

// F64 appends a double.
func (a *Args) F64(v float64) *Args { a.a.F64(v); return a }

// Len returns the number of arguments.
func (a *Args) Len() int { return a.a.Len() }

// Reset empties a for reuse.
func (a *Args) Reset() { a.a.Reset() }
