package kernels

import (
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/distopt/distopt/internal/cuda"
)

// Set is every embedded module loaded on one device, in one variant. Its
// launchers are safe for concurrent use.
type Set struct {
	d       *cuda.Device
	v       Variant
	sms     int
	modules []*cuda.Module
	images  map[string]cuda.Image // by module
	fns     map[string]*cuda.Function
	pool    scratchPool
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
	if !v.supports(d.Info()) {
		return nil, fmt.Errorf("%w: variant %v on sm_%d%d", ErrUnsupported, v, d.Info().Major, d.Info().Minor)
	}
	return load(d, v, Modules())
}

// load loads the named modules on d in variant v, which d supports.
func load(d *cuda.Device, v Variant, names []string) (*Set, error) {
	start := time.Now()
	k := &Set{d: d, v: v, sms: d.Info().Multiprocessors, fns: map[string]*cuda.Function{}, images: map[string]cuda.Image{}}
	for _, name := range names {
		if err := k.loadModule(name); err != nil {
			k.Close()
			return nil, err
		}
	}
	slog.Debug("kernels: loaded", "variant", v, "device", fmt.Sprintf("sm_%d%d", d.Info().Major, d.Info().Minor),
		"code", k.ImageSummary(), "modules", len(k.modules), "took", time.Since(start))
	return k, nil
}

// loadModule loads module name in the set's variant and looks up its
// kernels.
func (k *Set) loadModule(name string) error {
	c, err := code(name, k.v)
	if err != nil {
		return err
	}
	m, err := k.d.LoadCode(c)
	if err != nil {
		return fmt.Errorf("kernels: loading %s_%v: %w", name, k.v, err)
	}
	k.modules = append(k.modules, m)
	k.images[name] = m.Image()
	for _, e := range entries(c.PTX) {
		f, err := m.Function(e)
		if err != nil {
			return fmt.Errorf("kernels: %s_%v: %w", name, k.v, err)
		}
		k.fns[e] = f
	}
	return nil
}

// Images returns what each module (by name) was loaded from: a cubin, or
// PTX compiled by the driver's JIT.
func (k *Set) Images() map[string]cuda.Image { return maps.Clone(k.images) }

// ImageSummary names each distinct image of the set's modules with the
// number of modules loaded from it: "PTX (driver JIT) x1, sm_90 cubin x19".
func (k *Set) ImageSummary() string {
	count := map[cuda.Image]int{}
	for _, im := range k.images {
		count[im]++
	}
	var parts []string
	for im, n := range count {
		parts = append(parts, fmt.Sprintf("%v x%d", im, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// Variant returns the variant loaded.
func (k *Set) Variant() Variant { return k.v }

// Device returns the device the set is loaded on.
func (k *Set) Device() *cuda.Device { return k.d }

// Close frees the scratch memory and unloads the modules, once the work
// queued through the Set is done. The Set must not be used afterwards.
func (k *Set) Close() error {
	first := k.freeScratch()
	for _, m := range k.modules {
		if err := m.Unload(); err != nil && first == nil {
			first = err
		}
	}
	k.modules, k.fns = nil, nil
	return first
}

// function returns the kernel called name; a name that no module defines is
// a programmer error and panics.
func (k *Set) function(name string) *cuda.Function {
	f, ok := k.fns[name]
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
