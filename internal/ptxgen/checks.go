package ptxgen

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"

	"github.com/distopt/distopt/internal/cuda"
)

// errNoModules is CheckKernels' answer for a tree without PTX.
var errNoModules = errors.New("ptxgen: no embedded modules")

// The checks below read a package's generated code (fsys holding ptx/ and
// cubin/, as LoadLibrary does) without a GPU, for the package's tests.
// Each returns one error per fault found.

// CheckKernels checks that every module exists in every variant, defining
// at least one kernel and the same ones in each, and that the modules
// define exactly the kernels of want (those the package's launchers can
// request): none missing, and none built for nothing, each costing
// start-up time and binary size.
func CheckKernels(fsys fs.FS, want []string) []error {
	wanted := map[string]bool{}
	for _, n := range want {
		wanted[n] = true
	}
	mods := Modules(fsys)
	if len(mods) == 0 {
		return []error{errNoModules}
	}
	var errs []error
	defined := map[string]bool{}
	for _, m := range mods {
		var first []string
		for i, v := range Variants {
			ptx, err := PTX(fsys, m, v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			names := Entries(ptx)
			slices.Sort(names)
			switch {
			case len(names) == 0:
				errs = append(errs, fmt.Errorf("%s_%v defines no kernel", m, v))
			case i == 0:
				first = names
			case !slices.Equal(first, names):
				errs = append(errs, fmt.Errorf("%s: variants define different kernels: %v and %v", m, first, names))
			}
			for _, n := range names {
				defined[n] = true
				if !wanted[n] {
					errs = append(errs, fmt.Errorf("%s_%v defines %s, which no launcher requests: remove it from %s.cu", m, v, n, m))
				}
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(wanted)) {
		if !defined[n] {
			errs = append(errs, fmt.Errorf("kernel %s is requested but no module defines it", n))
		}
	}
	return errs
}

// CheckCubins checks the machine code shipped: every module but those of
// ptxOnly has, for each variant, one cubin for the architecture the
// variant targets (sm_80, sm_90), built for it (the ELF header's
// architecture), defining exactly the kernels of the variant's PTX; the
// modules of ptxOnly have none, and ptxOnly names only modules.
func CheckCubins(fsys fs.FS, ptxOnly map[string]bool) []error {
	var errs []error
	for _, m := range slices.Sorted(maps.Keys(ptxOnly)) {
		if !slices.Contains(Modules(fsys), m) {
			errs = append(errs, fmt.Errorf("ptxonly names %s, which is no module", m))
		}
	}
	for _, m := range Modules(fsys) {
		for _, v := range Variants {
			c, err := Load(fsys, ptxDir, cubinDir, m, v.String())
			if err != nil {
				errs = append(errs, err)
				continue
			}
			archs := slices.Sorted(maps.Keys(c.Cubins))
			switch {
			case ptxOnly[m] && len(archs) != 0:
				errs = append(errs, fmt.Errorf("%s_%v: cubins for %v, but ptxonly names it", m, v, archs))
			case ptxOnly[m]:
			case len(archs) != 1 || c.Cubins[v.Arch()] == nil:
				errs = append(errs, fmt.Errorf("%s_%v: cubins for %v, want sm_%d only", m, v, archs, v.Arch()))
			default:
				errs = append(errs, checkCubin(c, v)...)
			}
		}
	}
	return errs
}

// checkCubin checks that the cubin of c for v's architecture is built for
// it and defines exactly the kernels of c's PTX.
func checkCubin(c cuda.Code, v Variant) []error {
	cubin := c.Cubins[v.Arch()]
	if got := cuda.ImageOf(cubin); got != (cuda.Image{Cubin: true, Arch: v.Arch()}) {
		return []error{fmt.Errorf("%s: the cubin is %v, want sm_%d", c.Name, got, v.Arch())}
	}
	names, err := CubinEntries(cubin)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", c.Name, err)}
	}
	want := Entries(c.PTX)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		return []error{fmt.Errorf("%s: the cubin defines %v, the PTX %v", c.Name, names, want)}
	}
	return nil
}

// HardwareFP8 are the FP8 conversion instructions of compute_90.
var HardwareFP8 = []string{"cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32",
	"cvt.rn.f16x2.e4m3x2", "cvt.rn.f16x2.e5m2x2"}

// CheckTargets checks how each module's PTX was generated: by nvcc 11.8,
// in the PTX ISA version every driver from 520 on loads, for the variant's
// target, and (sm80) without the hardware FP8 conversions, so that the
// sm80 PTX really tests the software path.
func CheckTargets(fsys fs.FS) []error {
	var errs []error
	for _, m := range Modules(fsys) {
		for _, v := range Variants {
			ptx, err := PTX(fsys, m, v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, want := range []string{"Cuda compilation tools, release 11.8", "\n.version 7.8\n",
				fmt.Sprintf("\n.target sm_%d\n", v.Arch()), "\n.address_size 64\n"} {
				if !bytes.Contains(ptx, []byte(want)) {
					errs = append(errs, fmt.Errorf("%s_%v: PTX lacks %q", m, v, want))
				}
			}
			for _, ins := range HardwareFP8 {
				if v == SM80 && bytes.Contains(ptx, []byte(ins)) {
					errs = append(errs, fmt.Errorf("%s_%v: sm80 PTX uses the hardware conversion %s", m, v, ins))
				}
			}
		}
	}
	return errs
}
