package kernels

import (
	"fmt"
	"math"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
)

// Elem is the element type of a high-precision input of the quantize
// kernels.
type Elem int

const (
	// F32 is float32.
	F32 Elem = iota + 1
	// BF16 is bfloat16, widened exactly to float32.
	BF16
)

func (e Elem) suffix() string {
	switch e {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	}
	panic(fmt.Sprintf("kernels: invalid element type %d", int(e)))
}

func fmtName(f fp8.Format) string {
	switch f {
	case fp8.E4M3:
		return "e4m3"
	case fp8.E5M2:
		return "e5m2"
	}
	panic(fmt.Sprintf("kernels: invalid FP8 format %v", f))
}

const kernelQuantScale = "quant_scale"

// quantKernels lists the names of quantize.cu's kernels, for the tests.
func quantKernels() []string {
	names := []string{kernelQuantScale, "quant_amax_f32", "quant_amax_bf16"}
	for _, f := range []string{"e4m3", "e5m2"} {
		for _, e := range []string{"f32", "bf16"} {
			names = append(names, "quant_cast_"+f+"_"+e, "quant_rows128_"+f+"_"+e, "quant_cols128_"+f+"_"+e)
		}
	}
	return names
}

// QuantAmax queues on s: *amax = max(*amax, max over i < n of
// Float32bits(src[i]) & 0x7fffffff), src of element type e (the key of
// fp8.Amax: NaN above +Inf above every finite value). Zero *amax first.
func (k *Set) QuantAmax(s *cuda.Stream, src cuda.DevicePtr, n int, e Elem, amax cuda.DevicePtr) error {
	name := "quant_amax_" + e.suffix()
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 4, new(cuda.Args).Ptr(src).U64(uint64(n)).Ptr(amax))
}

// marginFactor is float32(2^-margin), as fp8.ScaleFromAmax computes it.
func marginFactor(margin int) float32 { return float32(math.Ldexp(1, -margin)) }

// QuantScale queues on s one thread computing, from the amax bits at amax,
// fp8.ScaleFromAmax(amax, f, margin, pow2) into the float32 at scale and
// scaleInv (either may be read back; both are written).
func (k *Set) QuantScale(s *cuda.Stream, amax, scale, scaleInv cuda.DevicePtr, f fp8.Format, margin int, pow2 bool) error {
	return s.Launch(k.function(kernelQuantScale), cuda.Dim3{X: 1}, cuda.Dim3{X: 32}, 0,
		new(cuda.Args).Ptr(amax).Ptr(scale).Ptr(scaleInv).F32(f.Max()).F32(marginFactor(margin)).U32(b2u(pow2)))
}

// QuantCast queues on s, for i < n: dst[i] = f.Encode(float32(src[i] *
// *scale)), the scale read from device memory (fp8.CastScaled with the
// scale QuantScale wrote, or a delayed-scaling history's); and when amax is
// not 0 it folds the amax of src into it as QuantAmax does.
func (k *Set) QuantCast(s *cuda.Stream, dst, src cuda.DevicePtr, n int, e Elem, f fp8.Format, scale, amax cuda.DevicePtr) error {
	name := "quant_cast_" + fmtName(f) + "_" + e.suffix()
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 4, new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(n)).Ptr(scale).Ptr(amax))
}

// QuantRows128 queues on s the 1x128 block cast of a row-major rows x cols
// matrix along its rows: each row is cast as fp8.CastBlocks1D(row, 128, f,
// margin, pow2) casts it, and the scale_inv of block j of row r is written
// at scaleInv[j*ld + r] (float32; cuBLASLt's VEC128_32F layout, ld >= rows).
// When amax is not 0 the amax of src is folded into it.
func (k *Set) QuantRows128(s *cuda.Stream, dst, scaleInv cuda.DevicePtr, ld int, src cuda.DevicePtr, rows, cols int, e Elem, f fp8.Format, margin int, pow2 bool, amax cuda.DevicePtr) error {
	name := "quant_rows128_" + fmtName(f) + "_" + e.suffix()
	if ld < rows {
		panic(fmt.Sprintf("kernels: QuantRows128: ld %d < rows %d", ld, rows))
	}
	if !checkLen(name, rows*cols) {
		return nil
	}
	blocks := rows * ((cols + 127) / 128)
	return k.launch1D(s, name, blocks*32, 1, new(cuda.Args).Ptr(dst).Ptr(scaleInv).U64(uint64(ld)).Ptr(src).
		U64(uint64(rows)).U64(uint64(cols)).F32(f.Max()).F32(marginFactor(margin)).U32(b2u(pow2)).Ptr(amax))
}

// QuantCols128 queues on s the 1x128 block cast of a row-major rows x cols
// matrix down its columns, written transposed: dst is row-major cols x
// rows, its row c the cast of column c as fp8.CastBlocks1D(column, 128, f,
// margin, pow2) casts it, and the scale_inv of block j of column c is
// written at scaleInv[j*ld + c] (ld >= cols). When amax is not 0 the amax
// of src is folded into it.
func (k *Set) QuantCols128(s *cuda.Stream, dst, scaleInv cuda.DevicePtr, ld int, src cuda.DevicePtr, rows, cols int, e Elem, f fp8.Format, margin int, pow2 bool, amax cuda.DevicePtr) error {
	name := "quant_cols128_" + fmtName(f) + "_" + e.suffix()
	if ld < cols {
		panic(fmt.Sprintf("kernels: QuantCols128: ld %d < cols %d", ld, cols))
	}
	if !checkLen(name, rows*cols) {
		return nil
	}
	grid := cuda.Dim3{X: uint32((cols + 31) / 32), Y: uint32((rows + 127) / 128)}
	return s.Launch(k.function(name), grid, cuda.Dim3{X: blockSize}, 0, new(cuda.Args).Ptr(dst).Ptr(scaleInv).
		U64(uint64(ld)).Ptr(src).U64(uint64(rows)).U64(uint64(cols)).F32(f.Max()).F32(marginFactor(margin)).
		U32(b2u(pow2)).Ptr(amax))
}
