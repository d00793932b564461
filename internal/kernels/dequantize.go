package kernels

import (
	"fmt"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
)

// ScaleKind says how DequantBF16 finds the scale_inv of an element.
type ScaleKind uint32

const (
	// ScaleTensor: one float32 for the whole matrix.
	ScaleTensor ScaleKind = 0
	// ScaleBlocks: one float32 per run of block consecutive elements of the
	// flattened matrix (fp8.Block1x128 with block 128).
	ScaleBlocks ScaleKind = 1
	// ScaleE8M0: one E8M0 byte per run of block elements (fp8.MXFP8, 32).
	ScaleE8M0 ScaleKind = 2
	// ScaleTiles: one float32 per 128x128 tile of the row-major matrix with
	// cols columns, in fp8.TileIndex order (fp8.Block128x128).
	ScaleTiles ScaleKind = 3
	// ScaleRows128: one float32 per run of 128 elements along a row of the
	// row-major matrix with cols columns, the scale of block j of row r at
	// scales[j*block + r] (block is the pitch, at least the row count).
	ScaleRows128 ScaleKind = 4
)

// DequantBF16 queues on s, for i < n: dst[i] = fp8.BF16FromFloat32(
// f.Decode(src[i]) * scaleInv(i)), the product a float32 multiply, with
// scaleInv(i) found by kind (block is the run length of ScaleBlocks and
// ScaleE8M0 and the pitch of ScaleRows128, cols the matrix width of
// ScaleTiles and ScaleRows128). It is
// fp8.Tensor.Dequantize rounded to bfloat16. It panics for a bad format or
// a negative n.
func (k *Set) DequantBF16(s *cuda.Stream, dst, src cuda.DevicePtr, n int, f fp8.Format, scales cuda.DevicePtr, kind ScaleKind, block, cols int) error {
	name := "dequant_bf16_" + fmtName(f)
	if kind > ScaleRows128 || kind != ScaleTensor && kind != ScaleTiles && block < 1 || (kind == ScaleTiles || kind == ScaleRows128) && cols < 1 {
		panic(fmt.Sprintf("kernels: DequantBF16: kind %d, block %d, cols %d", kind, block, cols))
	}
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 1, new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(n)).Ptr(scales).U32(uint32(kind)).
		U64(uint64(block)).U64(uint64(cols)))
}
