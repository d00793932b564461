package kernels

import (
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/ptxgen"
)

// Set is every embedded module loaded on one device, in one variant. Its
// launchers are safe for concurrent use.
type Set struct {
	d   *cuda.Device
	lib *ptxgen.Library
	v   Variant
	sms int
}

// Load loads every module on d in the variant VariantFor picks.
func Load(d *cuda.Device) (*Set, error) {
	v, err := VariantFor(d.Info())
	if err != nil {
		return nil, err
	}
	return LoadVariant(d, v)
}

// LoadModules loads only the named modules (the .cu files' names, see
// Modules) on d, in the variant VariantFor picks, for a package that
// launches the kernels of a few of them: collective/fp8grad loads
// "gradfp8" alone. Launching a kernel of another module panics.
func LoadModules(d *cuda.Device, names ...string) (*Set, error) {
	v, err := VariantFor(d.Info())
	if err != nil {
		return nil, err
	}
	return load(d, v, names)
}

// LoadVariant loads every module on d in variant v, from the cubins for
// d's architecture where they are shipped (sm_80 for 8.x, sm_90 for 9.0),
// else from the PTX through the driver's JIT (newer GPUs; the sm80 variant
// on a 9.0 GPU; DISTOPT_CUDA_PTX=1). Images says which. It fails with
// ErrUnsupported when d cannot run v, and with the JIT's log when the
// driver rejects the PTX.
func LoadVariant(d *cuda.Device, v Variant) (*Set, error) {
	return load(d, v, Modules())
}

// load loads the named modules on d in variant v.
func load(d *cuda.Device, v Variant, names []string) (*Set, error) {
	lib, err := ptxgen.LoadModules(d, ptxFiles, v, names)
	if err != nil {
		return nil, err
	}
	return &Set{d: d, lib: lib, v: v, sms: d.Info().Multiprocessors}, nil
}

// Images returns what each module (by name) was loaded from: a cubin, or
// PTX compiled by the driver's JIT.
func (k *Set) Images() map[string]cuda.Image { return k.lib.Images() }

// ImageSummary names each distinct image of the set's modules with the
// number of modules loaded from it: "sm_90 cubin x14".
func (k *Set) ImageSummary() string { return k.lib.ImageSummary() }

// Variant returns the variant loaded.
func (k *Set) Variant() Variant { return k.v }

// Device returns the device the set is loaded on.
func (k *Set) Device() *cuda.Device { return k.d }

// Close unloads the modules, once the work queued through the Set is done.
// The Set must not be used afterwards.
func (k *Set) Close() error { return k.lib.Unload() }

// function returns the kernel called name; a name that no module defines is
// a programmer error and panics.
func (k *Set) function(name string) *cuda.Function {
	f, ok := k.lib.Function(name)
	if !ok {
		panic(fmt.Sprintf("kernels: no kernel %q in variant %v", name, k.v))
	}
	return f
}

// blockSize is the number of threads per block of the elementwise kernels.
const blockSize = 256

// blocksPerSM bounds the grid of the grid-stride kernels: enough resident
// threads to saturate memory, few enough that each thread loops.
const blocksPerSM = 8

// launch1D queues kernel name over n elements taken perThread at a time,
// with the grid bounded by the device's size; args are the kernel's
// parameters. n must be positive.
func (k *Set) launch1D(s *cuda.Stream, name string, n, perThread int, args *cuda.Args) error {
	units := (n + perThread - 1) / perThread
	blocks := min((units+blockSize-1)/blockSize, blocksPerSM*max(k.sms, 1))
	return s.Launch(k.function(name), cuda.Dim3{X: uint32(blocks)}, cuda.Dim3{X: blockSize}, 0, args)
}

// checkLen panics if n is negative, and reports whether there is work.
func checkLen(op string, n int) bool {
	if n < 0 {
		panic(fmt.Sprintf("kernels: %s of %d elements", op, n))
	}
	return n > 0
}
