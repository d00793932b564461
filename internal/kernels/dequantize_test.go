package kernels

import (
	"fmt"
	"github.com/distopt/distopt/internal/cuda/cudatest"
	"testing"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
)

// TestDequantBF16 quantizes matrices with every recipe on the CPU
// (fp8.Quantize), dequantizes them on the GPU and compares with
// fp8.Tensor.Dequantize rounded by fp8.BF16FromFloat32, bit for bit.
func TestDequantBF16(t *testing.T) {
	d, sets := loadAll(t)
	s := cudatest.Stream(t, d)
	scalings := []fp8.Scaling{fp8.TensorCurrent, fp8.Block1x128, fp8.Block128x128, fp8.MXFP8}
	for _, k := range sets {
		for _, sc := range scalings {
			for _, f := range []fp8.Format{fp8.E4M3, fp8.E5M2} {
				for _, sh := range [][2]int{{1, 1}, {3, 100}, {130, 257}, {256, 128}} {
					t.Run(fmt.Sprintf("%v/%v/%v/%dx%d", k.v, sc, f, sh[0], sh[1]), func(t *testing.T) {
						checkDequant(t, k, s, fp8.Recipe{Format: f, Scaling: sc}, sh[0], sh[1])
					})
				}
			}
		}
	}
}

func checkDequant(t *testing.T, k *Set, s *cuda.Stream, r fp8.Recipe, rows, cols int) {
	d := s.Device()
	n := rows * cols
	vals := finiteValues(testValues(n, uint64(n)))
	tn, err := fp8.Quantize(vals, []int{rows, cols}, r, nil)
	must(t, err)
	want := make([]float32, n)
	must(t, tn.Dequantize(want))
	src := cudatest.Alloc(t, d, n)
	must(t, s.Upload(src, tn.Data))
	scales := cuda.Bytes(tn.ScaleInv)
	kind, block := ScaleTensor, 0
	switch r.Scaling {
	case fp8.Block1x128:
		kind, block = ScaleBlocks, 128
	case fp8.MXFP8:
		kind, block, scales = ScaleE8M0, fp8.MXBlock, tn.ScaleE8M0
	case fp8.Block128x128:
		kind = ScaleTiles
	}
	sp := cudatest.Alloc(t, d, len(scales))
	must(t, s.Upload(sp, scales))
	out := newGuarded(t, d, s, 2*n, 0)
	must(t, k.DequantBF16(s, out.ptr(), src, n, r.Format, sp, kind, block, cols))
	got := cuda.View[uint16](out.read(t, s))
	for i := range n {
		if w := fp8.BF16FromFloat32(want[i]); got[i] != w {
			t.Fatalf("element %d (code %#x): %#04x, want %#04x", i, tn.Data[i], got[i], w)
		}
	}
}

// TestGEMMKernelEntries checks that every kernel the launchers of
// transpose.go, quantize.go and dequantize.go name is defined in every
// variant.
func TestGEMMKernelEntries(t *testing.T) {
	names := append([]string{kernelTranspose, kernelScaleGrid, "dequant_bf16_e4m3", "dequant_bf16_e5m2"}, quantKernels()...)
	for _, v := range Variants {
		defined := map[string]bool{}
		for _, m := range Modules() {
			ptx, err := PTX(m, v)
			must(t, err)
			for _, e := range entries(ptx) {
				defined[e] = true
			}
		}
		for _, n := range names {
			if !defined[n] {
				t.Errorf("%v: kernel %q is defined by no module", v, n)
			}
		}
	}
}
