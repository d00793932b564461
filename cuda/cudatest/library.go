package cudatest

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/internal/ptxgen"
)

// CheckLibrary checks, without a GPU, the generated code of a package's
// cuda.Library: fsys as cuda.Device.LoadLibrary reads it, dir the
// package's directory (its file ptxonly names the modules shipped without
// cubins, one per line), and kernels every kernel the package's launchers
// can request. It fails tb for each fault: PTX not made by nvcc 11.8 for
// its variant's target (or sm80 PTX with hardware FP8 conversions), a
// module missing from a variant or defining other kernels there, a kernel
// of kernels that no module defines, a kernel defined that is not in
// kernels, and a cubin missing, extra, built for another architecture or
// defining other kernels than its PTX.
func CheckLibrary(tb testing.TB, fsys fs.FS, dir string, kernels []string) {
	tb.Helper()
	ptxOnly, err := ptxgen.PTXOnly(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, errs := range [][]error{ptxgen.CheckTargets(fsys), ptxgen.CheckKernels(fsys, kernels), ptxgen.CheckCubins(fsys, ptxOnly)} {
		for _, err := range errs {
			tb.Error(err)
		}
	}
}

// EnvVariants is the environment variable that restricts the GPU tests of
// a Library to some variants, comma-separated (such as "sm90": the cubins
// of a 9.0 GPU, without the JIT of the sm80 PTX, a minute or two on a
// fresh machine).
const EnvVariants = "DISTOPT_TEST_VARIANTS"

// Variants returns the variants of a cuda.Library that a test runs on d:
// those d supports, less those DISTOPT_TEST_VARIANTS leaves out when set.
// It logs each one left out.
func Variants(tb testing.TB, d *cuda.Device) []cuda.Variant {
	tb.Helper()
	only := os.Getenv(EnvVariants)
	var vs []cuda.Variant
	for _, v := range cuda.Variants() {
		switch {
		case !v.Supports(d.Info()):
			tb.Logf("device %v cannot run variant %v", d.Info(), v)
		case only != "" && !slices.Contains(strings.Split(only, ","), v.String()):
			tb.Logf("variant %v left out (%s=%s)", v, EnvVariants, only)
		default:
			vs = append(vs, v)
		}
	}
	return vs
}

// LoadVariants calls load for each of Variants(tb, d), failing the test
// when it fails, and closes what it returned when the test ends.
func LoadVariants[T interface{ Close() error }](tb testing.TB, d *cuda.Device, load func(cuda.Variant) (T, error)) []T {
	tb.Helper()
	var sets []T
	for _, v := range Variants(tb, d) {
		k, err := load(v)
		if err != nil {
			tb.Fatalf("loading variant %v: %v", v, err)
		}
		tb.Cleanup(func() { k.Close() })
		sets = append(sets, k)
	}
	return sets
}

// CheckImages checks on d what each variant of the Library of fsys (see
// CheckLibrary for fsys and dir) loads from: the cubin of d's architecture
// when the variant targets it (the sm90 variant on a 9.0 GPU, the sm80 one
// on 8.x), the PTX otherwise, for the modules of dir's file ptxonly, and
// with cuda.EnvPTX=1.
func CheckImages(tb testing.TB, d *cuda.Device, fsys fs.FS, dir string) {
	tb.Helper()
	info := d.Info()
	ptxOnly, err := ptxgen.PTXOnly(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, v := range Variants(tb, d) {
		want := cuda.Image{}
		if v.Arch()/10 == info.Major {
			want = cuda.Image{Cubin: true, Arch: v.Arch()}
		}
		for _, force := range []bool{false, true} {
			tb.Setenv(cuda.EnvPTX, map[bool]string{false: "", true: "1"}[force])
			lib, err := d.LoadLibrary(fsys, v)
			if err != nil {
				tb.Fatal(err)
			}
			images := lib.Images()
			if len(images) != len(cuda.LibraryModules(fsys)) {
				tb.Errorf("%v: images of %d modules, want %d", v, len(images), len(cuda.LibraryModules(fsys)))
			}
			for m, im := range images {
				w := want
				if force || ptxOnly[m] {
					w = cuda.Image{}
				}
				if im != w {
					tb.Errorf("%v on %v (%s=%v): %s loaded from %v, want %v", v, info, cuda.EnvPTX, force, m, im, w)
				}
			}
			if err := lib.Unload(); err != nil {
				tb.Fatal(err)
			}
		}
	}
}
