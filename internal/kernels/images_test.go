package kernels

import (
	"testing"

	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"github.com/distopt/distopt/internal/ptxgen"
)

// TestImages checks on a GPU what each variant loads from: the cubin of the
// device's architecture when the variant targets it (the sm90 variant on a
// 9.0 GPU, the sm80 one on 8.x), the PTX otherwise, for the modules of the
// file ptxonly, and with DISTOPT_CUDA_PTX=1.
func TestImages(t *testing.T) {
	d := cudatest.Require(t)
	info := d.Info()
	ptxOnly, err := ptxgen.PTXOnly(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Variants {
		if !v.supports(info) || !tested(v) {
			continue
		}
		want := cuda.Image{}
		if arch[v]/10 == info.Major {
			want = cuda.Image{Cubin: true, Arch: arch[v]}
		}
		for _, force := range []bool{false, true} {
			t.Setenv(cuda.EnvPTX, map[bool]string{false: "", true: "1"}[force])
			k, err := LoadVariant(d, v)
			if err != nil {
				t.Fatal(err)
			}
			images := k.Images()
			if len(images) != len(Modules()) {
				t.Errorf("%v: images of %d modules, want %d", v, len(images), len(Modules()))
			}
			for m, im := range images {
				w := want
				if force || ptxOnly[m] {
					w = cuda.Image{}
				}
				if im != w {
					t.Errorf("%v on %v (%s=%v): %s loaded from %v, want %v", v, info, cuda.EnvPTX, force, m, im, w)
				}
			}
			must(t, k.Close())
		}
	}
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
