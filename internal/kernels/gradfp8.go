package kernels

import (
	"fmt"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
)

// gradKernels lists the kernels of gradfp8.cu, for the tests.
func gradKernels() []string {
	var names []string
	for _, f := range []string{"e4m3", "e5m2"} {
		for _, e := range []string{"f32", "bf16"} {
			names = append(names, "gradq_"+f+"_"+e, "gradsum_"+f+"_"+e)
		}
	}
	return names
}

// GradPieceBytes is the size of the wire piece of n elements in blocks of
// block (collective/fp8grad.PieceBytes): 4*ceil(n/block) bytes of float32
// scale_inv, n codes, zero padding to a multiple of 4.
func GradPieceBytes(n, block int) int { return 4*((n+block-1)/block) + (n+3)/4*4 }

// GradQuantize queues on s the quantization of the pieces consecutive
// pieces of n elements of src (element type e) into pieces wire pieces of
// GradPieceBytes(n, block) bytes at dst, as collective/fp8grad.Quantize
// does each piece, bit for bit: power-of-two block scales from the finite
// elements, the NaN code for a NaN or an infinity. residual (0:
// none) is float32 over the pieces*n elements; it is added to src and
// updated (error feedback).
func (k *Set) GradQuantize(s *cuda.Stream, dst, src, residual cuda.DevicePtr, n, pieces, block int, e Elem, f fp8.Format) error {
	name := "gradq_" + fmtName(f) + "_" + e.suffix()
	checkGrad(name, n, pieces, block)
	warps := pieces * ((n + block - 1) / block)
	if warps == 0 {
		return nil
	}
	return k.launch1D(s, name, 32*warps, 1, new(cuda.Args).Ptr(dst).Ptr(src).Ptr(residual).U64(uint64(n)).
		U64(uint64(pieces)).U64(uint64(block)).U64(uint64(GradPieceBytes(n, block))).F32(f.Max()))
}

// GradSum queues on s the sum of the pieces wire pieces at src into the n
// elements of dst (element type e: float32, or rounded to bfloat16), as
// collective/fp8grad.DequantSum does, bit for bit: decoded and added in
// float32 in piece order, divided by div unless div is 1, every NaN
// written as 0x7fc00000 (bfloat16 0x7fff).
func (k *Set) GradSum(s *cuda.Stream, dst, src cuda.DevicePtr, n, pieces, block int, e Elem, f fp8.Format, div float32) error {
	name := "gradsum_" + fmtName(f) + "_" + e.suffix()
	checkGrad(name, n, pieces, block)
	if pieces < 1 {
		panic(fmt.Sprintf("kernels: %s of %d pieces", name, pieces))
	}
	if n == 0 {
		return nil
	}
	return k.launch1D(s, name, n, 1, new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(n)).U64(uint64(pieces)).
		U64(uint64(block)).U64(uint64(GradPieceBytes(n, block))).F32(div))
}

// checkGrad panics on sizes no caller may pass.
func checkGrad(name string, n, pieces, block int) {
	if n < 0 || pieces < 0 || block < 1 {
		panic(fmt.Sprintf("kernels: %s: n %d, pieces %d, block %d", name, n, pieces, block))
	}
}
