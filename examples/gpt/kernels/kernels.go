package kernels

import (
	"embed"
	"errors"
	"fmt"

	"github.com/distopt/distopt/cuda"
)

// ptxFiles holds gen.sh's output: the PTX of every module and variant, and
// the cubins of each variant for the architecture it targets (none for the
// modules of the file ptxonly).
//
//go:embed ptx/*.ptx cubin/*.cubin
var ptxFiles embed.FS

// Set is every module of this package loaded on one device, in one
// variant. Its launchers are safe for concurrent use.
type Set struct {
	d    *cuda.Device
	lib  *cuda.Library
	sms  int
	pool scratchPool
}

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
	lib, err := d.LoadLibrary(ptxFiles, v)
	if err != nil {
		return nil, err
	}
	return &Set{d: d, lib: lib, sms: d.Info().Multiprocessors}, nil
}

// Library returns the loaded modules: their variant, and what each was
// loaded from.
func (k *Set) Library() *cuda.Library { return k.lib }

// Device returns the device the set is loaded on.
func (k *Set) Device() *cuda.Device { return k.d }

// Close frees the scratch memory and unloads the modules, once the work
// queued through the Set is done. The Set must not be used afterwards.
func (k *Set) Close() error { return errors.Join(k.freeScratch(), k.lib.Unload()) }

// function returns the kernel called name; a name that no module defines is
// a programmer error and panics.
func (k *Set) function(name string) *cuda.Function {
	f, ok := k.lib.Function(name)
	if !ok {
		panic(fmt.Sprintf("kernels: no kernel %q in variant %v", name, k.lib.Variant()))
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
