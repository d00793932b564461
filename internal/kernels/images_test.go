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

// TestLoadModules loads the gradfp8 module alone: the set holds its image
// only, and a module that does not exist is an error.
func TestLoadModules(t *testing.T) {
	d := cudatest.Require(t)
	k, err := LoadModules(d, "gradfp8")
	if err != nil {
		t.Fatal(err)
	}
	if images := k.Images(); len(images) != 1 {
		t.Errorf("images %v, want gradfp8's alone", images)
	}
	k.function("gradq_e4m3_f32") // panics when the set lacks it
	must(t, k.Close())
	if k, err := LoadModules(d, "nosuchmodule"); err == nil {
		k.Close()
		t.Error("LoadModules of a module that does not exist succeeded")
	}
}
