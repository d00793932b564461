package kernels

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
)

// launcherKernels lists every kernel name a launcher of this package can
// request.
func launcherKernels() []string {
	return append(append(append(append(append(gptKernels(), fusedKernels()...), flashKernels()...), attentionKernels()...), gradKernels()...), bwdKernels()...)
}

// TestLibrary checks the generated code without a GPU: PTX from nvcc 11.8
// for each variant, every module in both variants with the same kernels,
// exactly the kernels the launchers request (none missing, none built for
// nothing), and a cubin per variant but for flash (ptxonly).
func TestLibrary(t *testing.T) { cudatest.CheckLibrary(t, ptxFiles, ".", launcherKernels()) }

// TestImages checks on a GPU what each variant loads from: the cubin of the
// device's architecture when the variant targets it, the PTX otherwise, for
// flash (ptxonly), and with DISTOPT_CUDA_PTX=1.
func TestImages(t *testing.T) { cudatest.CheckImages(t, cudatest.Require(t), ptxFiles, ".") }

// TestModulesWithoutFlash checks the module list of LoadWithoutFlash
// without a GPU: every module of the package but flash, and flash is a
// module shipped as PTX alone (ptxonly), the one whose JIT it defers; and
// every kernel of flash serves a flash launcher, so that a model on other
// attention never needs the module.
func TestModulesWithoutFlash(t *testing.T) {
	all := cuda.LibraryModules(ptxFiles)
	got := modulesWithout(flashModule)
	if len(got) != len(all)-1 || slices.Contains(got, flashModule) || !slices.Contains(all, flashModule) {
		t.Errorf("modules %v without %q: %v", all, flashModule, got)
	}
	only, err := os.ReadFile("ptxonly")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(only)), flashModule) {
		t.Errorf("ptxonly does not list %q: LoadWithoutFlash defers a module that has machine code", flashModule)
	}
	for _, v := range []cuda.Variant{cuda.SM80, cuda.SM90} {
		ptx, err := cuda.LibraryPTX(ptxFiles, flashModule, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range cuda.KernelNames(ptx) {
			if !slices.Contains(flashKernels(), name) {
				t.Errorf("%v: kernel %q of module %q serves no flash launcher: a model without flash attention would miss it", v, name, flashModule)
			}
		}
	}
}

// TestLoadFlashGPU checks on a GPU that LoadWithoutFlash leaves the flash
// module out (no launch can find its kernels), and that LoadFlash, called
// twice, brings it in once.
func TestLoadFlashGPU(t *testing.T) {
	k, err := LoadWithoutFlash(cudatest.Require(t))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if _, ok := k.Images()[flashModule]; ok {
		t.Fatalf("LoadWithoutFlash loaded %q: %v", flashModule, k.Images())
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("the flash kernel %q was found before LoadFlash", kernelFlashPrep)
			}
		}()
		k.function(kernelFlashPrep)
	}()
	for range 2 {
		if err := k.LoadFlash(); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := k.Images()[flashModule]; !ok || len(k.Images()) != len(cuda.LibraryModules(ptxFiles)) {
		t.Errorf("after LoadFlash: %v", k.Images())
	}
	for _, name := range flashKernels() {
		k.function(name) // panics if missing
	}
}
