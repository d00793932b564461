package kernels

import (
	"testing"

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
