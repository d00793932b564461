package kernels

import (
	"testing"

	pcudatest "github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/cudalink"
)

// TestImages checks on a GPU what each variant loads from: the cubin of the
// device's architecture when the variant targets it (the sm90 variant on a
// 9.0 GPU, the sm80 one on 8.x), the PTX otherwise, for the modules of the
// file ptxonly, and with DISTOPT_CUDA_PTX=1.
func TestImages(t *testing.T) {
	pcudatest.CheckImages(t, cudalink.PublicDevice(cudatest.Require(t)), ptxFiles, ".")
}
