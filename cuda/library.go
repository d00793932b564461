package cuda

import (
	"io/fs"

	"github.com/distopt/distopt/internal/ptxgen"
)

// EnvPTX names the environment variable that makes LoadLibrary take the
// PTX even where a cubin fits: "1". It serves to compare the two, or to
// rule the machine code out.
const EnvPTX = "DISTOPT_CUDA_PTX"

// Library is the kernels of a package, loaded on one device in one
// variant. The package ships them as files that this module's
// internal/ptxgen/gen.sh writes, one pair per CUDA source NAME.cu and
// variant:
//
//	ptx/NAME_sm80.ptx      cubin/NAME_sm80.sm_80.cubin
//	ptx/NAME_sm90.ptx      cubin/NAME_sm90.sm_90.cubin
//
// It typically embeds them with //go:embed ptx/*.ptx cubin/*.cubin. A
// module may ship without cubins. The driver's JIT then compiles its PTX.
type Library struct {
	d   *Device
	l   *ptxgen.Library
	fns map[string]*Function
}

// LoadLibrary loads every module of fsys on d in variant v. It takes the
// cubin for d's architecture where there is one: sm_80 for 8.x, sm_90 for
// 9.0. Elsewhere it takes the PTX, which the driver's JIT compiles: on
// newer GPUs, for the sm80 variant on a 9.0 GPU, for modules without
// cubins, and with EnvPTX=1. The JIT takes seconds to a minute on a fresh
// machine; the driver caches its result. Images says what was loaded. The
// error matches ErrUnsupported when d cannot run v, and holds the JIT's
// log when the driver rejects the PTX. Unload releases the library.
func (d *Device) LoadLibrary(fsys fs.FS, v Variant) (*Library, error) {
	return d.LoadModules(fsys, v, LibraryModules(fsys))
}

// LoadModules is LoadLibrary for the named modules of fsys alone (see
// LibraryModules), so that a module whose JIT costs seconds can wait until
// it is needed. A name that fsys lacks is an error.
func (d *Device) LoadModules(fsys fs.FS, v Variant, names []string) (*Library, error) {
	l, err := ptxgen.LoadModules(d.d, fsys, ptxgen.Variant(v), names)
	if err != nil {
		return nil, err
	}
	lib := &Library{d: d, l: l, fns: map[string]*Function{}}
	for name, f := range l.Functions() {
		lib.fns[name] = &Function{f: f, d: d}
	}
	return lib, nil
}

// Function returns the kernel called name (its extern "C" name), and false
// when no module defines it.
func (l *Library) Function(name string) (*Function, bool) {
	f, ok := l.fns[name]
	return f, ok
}

// Images returns what each module (by name) was loaded from.
func (l *Library) Images() map[string]Image {
	images := map[string]Image{}
	for m, im := range l.l.Images() {
		images[m] = Image(im)
	}
	return images
}

// ImageSummary names each distinct image of the modules with the number
// of modules loaded from it: "PTX (driver JIT) x1, sm_90 cubin x5".
func (l *Library) ImageSummary() string { return l.l.ImageSummary() }

// Variant returns the variant loaded.
func (l *Library) Variant() Variant { return Variant(l.l.Variant()) }

// Device returns the device the library is loaded on.
func (l *Library) Device() *Device { return l.d }

// Unload unloads the modules, once the work queued with their kernels is
// done. The Library must not be used afterwards.
func (l *Library) Unload() error {
	l.fns = nil
	return l.l.Unload()
}

// LibraryModules returns the names of the modules of fsys (its CUDA
// sources), sorted.
func LibraryModules(fsys fs.FS) []string { return ptxgen.Modules(fsys) }

// LibraryPTX returns the PTX text of module in variant v from fsys.
func LibraryPTX(fsys fs.FS, module string, v Variant) ([]byte, error) {
	return ptxgen.PTX(fsys, module, ptxgen.Variant(v))
}

// KernelNames returns the names of the kernels a PTX text defines, in its
// order.
func KernelNames(ptx []byte) []string { return ptxgen.Entries(ptx) }
