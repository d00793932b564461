package kernels

import (
	"embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/distopt/distopt/cuda"
)

// ptxFiles holds gen.sh's output: the PTX of every module and variant, and
// the cubins of each variant for the architecture it targets (none for the
// modules of the file ptxonly).
//
//go:embed ptx/*.ptx cubin/*.cubin
var ptxFiles embed.FS

// Set is the modules of this package loaded on one device, in one
// variant: all of them (Load), or all but the flash attention kernels
// until LoadFlash (LoadWithoutFlash). Its launchers are safe for
// concurrent use.
type Set struct {
	d       *cuda.Device
	lib     *cuda.Library
	v       cuda.Variant
	sms     int
	pool    scratchPool
	flashMu sync.Mutex
	flash   atomic.Pointer[cuda.Library] // the flash module, when loaded apart
}

// flashModule is the module of the flash attention kernels: shipped as PTX
// alone (file ptxonly), so that on a fresh machine the driver's JIT spends
// seconds on it. A model whose attention runs elsewhere (cuDNN) never
// needs it.
const flashModule = "flash"

// Load loads every module on d in the variant cuda.VariantFor picks.
func Load(d *cuda.Device) (*Set, error) {
	v, err := cuda.VariantFor(d.Info())
	if err != nil {
		return nil, err
	}
	return LoadVariant(d, v)
}

// LoadVariant loads every module on d in variant v (see
// cuda.Device.LoadLibrary: from the cubins where they fit d, else from the
// PTX). It fails with an error matching cuda.ErrUnsupported when d cannot
// run v.
func LoadVariant(d *cuda.Device, v cuda.Variant) (*Set, error) {
	return loadModules(d, v, cuda.LibraryModules(ptxFiles))
}

// loadModules makes the Set of the named modules on d in variant v.
func loadModules(d *cuda.Device, v cuda.Variant, names []string) (*Set, error) {
	lib, err := d.LoadModules(ptxFiles, v, names)
	if err != nil {
		return nil, err
	}
	return &Set{d: d, lib: lib, v: v, sms: d.Info().Multiprocessors}, nil
}

// LoadWithoutFlash is Load without the flash attention kernels, which
// LoadFlash adds when a model takes them: a model on cuDNN's attention
// starts without their JIT.
func LoadWithoutFlash(d *cuda.Device) (*Set, error) {
	v, err := cuda.VariantFor(d.Info())
	if err != nil {
		return nil, err
	}
	return loadModules(d, v, modulesWithout(flashModule))
}

// modulesWithout lists the package's modules but skip.
func modulesWithout(skip string) []string {
	return slices.DeleteFunc(cuda.LibraryModules(ptxFiles), func(m string) bool { return m == skip })
}

// LoadFlash loads the flash attention kernels into a Set made by
// LoadWithoutFlash; it does nothing when they are loaded. Call it before
// the first Flash launch (gpumodel does, for AttentionFlash).
func (k *Set) LoadFlash() error {
	if _, ok := k.lib.Function(kernelFlashPrep); ok || k.flash.Load() != nil {
		return nil
	}
	k.flashMu.Lock()
	defer k.flashMu.Unlock()
	if k.flash.Load() != nil {
		return nil
	}
	lib, err := k.d.LoadModules(ptxFiles, k.v, []string{flashModule})
	if err != nil {
		return err
	}
	k.flash.Store(lib)
	return nil
}

// Images says what each loaded module (by name) was loaded from, the
// flash module's included once LoadFlash has loaded it.
func (k *Set) Images() map[string]cuda.Image {
	im := k.lib.Images()
	if f := k.flash.Load(); f != nil {
		maps.Copy(im, f.Images())
	}
	return im
}

// Library returns the modules loaded by Load or LoadWithoutFlash: their
// variant, and what each was loaded from. Images also covers the flash
// module that LoadFlash adds.
func (k *Set) Library() *cuda.Library { return k.lib }

// Device returns the device the set is loaded on.
func (k *Set) Device() *cuda.Device { return k.d }

// Close frees the scratch memory and unloads the modules, once the work
// queued through the Set is done. The Set must not be used afterwards.
func (k *Set) Close() error {
	err := errors.Join(k.freeScratch(), k.lib.Unload())
	if f := k.flash.Load(); f != nil {
		err = errors.Join(err, f.Unload())
	}
	return err
}

// function returns the kernel called name; a name that no module defines is
// a programmer error and panics.
func (k *Set) function(name string) *cuda.Function {
	f, ok := k.lib.Function(name)
	if !ok {
		if fl := k.flash.Load(); fl != nil {
			f, ok = fl.Function(name)
		}
	}
	if !ok {
		panic(fmt.Sprintf("kernels: no kernel %q in variant %v (the flash kernels of a Set made by LoadWithoutFlash need LoadFlash)", name, k.lib.Variant()))
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
