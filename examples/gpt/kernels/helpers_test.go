package kernels

import (
	"slices"
	"testing"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
)

// loadAll opens GPU 0 (or skips, see cudatest) and loads every variant the
// device supports (those DISTOPT_TEST_VARIANTS lists, comma-separated,
// when set), unloading them when the test ends.
func loadAll(t testing.TB) (*cuda.Device, []*Set) {
	t.Helper()
	d := cudatest.Require(t)
	return d, cudatest.LoadVariants(t, d, func(v cuda.Variant) (*Set, error) { return LoadVariant(d, v) })
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkDefined checks that module defines every kernel of names in every
// variant's PTX (CPU only: the launchers of a module must find their
// kernels).
func checkDefined(t *testing.T, module string, names []string) {
	t.Helper()
	for _, v := range cuda.Variants() {
		ptx, err := cuda.LibraryPTX(ptxFiles, module, v)
		if err != nil {
			t.Fatal(err)
		}
		defined := cuda.KernelNames(ptx)
		for _, n := range names {
			if !slices.Contains(defined, n) {
				t.Errorf("%s_%v does not define %s (it defines %v)", module, v, n, defined)
			}
		}
	}
}
