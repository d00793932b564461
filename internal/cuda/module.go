package cuda

import "strings"

// Module is code loaded into the device's primary context (a CUmodule).
type Module struct {
	d       *Device
	h       uintptr
	infoLog string
	image   Image
}

// LoadModule loads PTX text, which the driver JIT-compiles for the device,
// or a cubin built for the device's architecture (cuModuleLoadDataEx). On
// failure the *Error's Detail holds the JIT's error log. The driver
// compiles PTX of any ISA version it knows, for the GPU it drives.
func (d *Device) LoadModule(image []byte) (*Module, error) {
	m := &Module{d: d, image: ImageOf(image)}
	err := d.Do(func() error {
		h, info, errLog, r := cuModuleLoadData(image)
		if r != Success {
			e := check("cuModuleLoadDataEx", r).(*Error)
			e.Detail = strings.TrimSpace(errLog)
			return e
		}
		m.h, m.infoLog = h, strings.TrimSpace(info)
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.res.count(&d.res.counts.Modules, 1)
	return m, nil
}

// InfoLog returns the JIT compiler's informational log of the load (such as
// register counts), possibly empty.
func (m *Module) InfoLog() string { return m.infoLog }

// Image says whether the module was loaded from a cubin or from PTX.
func (m *Module) Image() Image { return m.image }

// Unload releases the module; its Functions become invalid. Unloading twice
// panics.
func (m *Module) Unload() error {
	if m.h == 0 {
		panic("cuda: Module unloaded twice")
	}
	h := m.h
	m.h = 0
	m.d.res.count(&m.d.res.counts.Modules, -1)
	return m.d.Do(func() error { return check("cuModuleUnload", cuModuleUnload(h)) })
}

// Function is a kernel of a module (a CUfunction).
type Function struct {
	m    *Module
	h    uintptr
	name string
}

// Function looks up the kernel called name (its extern "C" name). A missing
// kernel gives an *Error with code ErrorNotFound.
func (m *Module) Function(name string) (*Function, error) {
	f := &Function{m: m, name: name}
	err := m.d.Do(func() error {
		var r Result
		f.h, r = cuModuleGetFunction(m.h, name)
		if err := check("cuModuleGetFunction", r); err != nil {
			err.(*Error).Detail = name
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// FuncAttribute is a CUfunction_attribute.
type FuncAttribute int

// Function attributes.
const (
	FuncMaxThreadsPerBlock        FuncAttribute = 0 // largest block the kernel can be launched with
	FuncSharedSizeBytes           FuncAttribute = 1 // static shared memory per block
	FuncLocalSizeBytes            FuncAttribute = 3 // local memory per thread (spills, stack)
	FuncNumRegs                   FuncAttribute = 4 // registers per thread
	FuncMaxDynamicSharedSizeBytes FuncAttribute = 8 // settable: dynamic shared memory limit
)

// Attribute returns an attribute of the kernel.
func (f *Function) Attribute(a FuncAttribute) (int, error) {
	var v int
	err := f.m.d.Do(func() error {
		var r Result
		v, r = cuFuncGetAttribute(a, f.h)
		return check("cuFuncGetAttribute", r)
	})
	return v, err
}

// SetAttribute sets a settable attribute of the kernel, such as
// FuncMaxDynamicSharedSizeBytes.
func (f *Function) SetAttribute(a FuncAttribute, v int) error {
	return f.m.d.Do(func() error { return check("cuFuncSetAttribute", cuFuncSetAttribute(f.h, a, v)) })
}
