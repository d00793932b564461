package kernels

import (
	"fmt"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/fp8"
)

// The kernels of gptbwd.cu: the backward producers of the linear layers'
// output gradients, folding the amax that package gemm would otherwise
// compute in a pass of its own (gemm.Linear.BackwardAmax), and the
// bfloat16-gradient forms of the LayerNorm and bias gradients.
const (
	kernelGPTLNGradXAmax     = "gpt_layernorm_grad_x_amax"
	kernelGPTLNGradXBF16Amax = "gpt_layernorm_grad_x_bf16_amax"
	kernelGPTGELUGradAmaxF32 = "gpt_gelu_grad_amax_f32"
	kernelGPTGELUGradAmaxBF  = "gpt_gelu_grad_amax_bf16"
	kernelGPTColumnSumBF16   = "gpt_column_sum_partial_bf16"
	kernelGPTLNGradWBBF16    = "gpt_layernorm_grad_wb_partial_bf16"
	kernelGPTDYCast          = "gpt_dy_cast_"
)

// bwdKernels lists the kernels of gptbwd.cu.
func bwdKernels() []string {
	names := []string{kernelGPTLNGradXAmax, kernelGPTLNGradXBF16Amax, kernelGPTGELUGradAmaxF32, kernelGPTGELUGradAmaxBF,
		kernelGPTColumnSumBF16, kernelGPTLNGradWBBF16}
	for _, f := range fusedFormats {
		names = append(names, kernelGPTDYCast+f+"_f32", kernelGPTDYCast+f+"_bf16")
	}
	for _, v := range rowVariants {
		names = append(names, kernelGPTLNGradXAmax+v.suffix, kernelGPTLNGradXBF16Amax+v.suffix)
	}
	return names
}

// zeroAmax zeroes the uint32 at amax unless amax is 0.
func zeroAmax(s *cuda.Stream, amax cuda.DevicePtr) error {
	if amax == 0 {
		return nil
	}
	return s.Memset32(amax, 0, 1)
}

// GPTLayerNormGradXAmax queues GPTLayerNormGradX (dx += the input gradient
// of the LayerNorm from dy, float32 [rows, n]) and, unless amax is 0, sets
// the uint32 at amax to the amax key of the dx it leaves: the largest
// Float32bits(v) & 0x7fffffff over its values, what gemm's quantization
// would compute (the key of fp8.Amax). dx's bits are GPTLayerNormGradX's
// (the same device code, the same kernel choice). With bf16, dy is
// bfloat16 (a bfloat16 dgrad output, gpumodel.Options.GradBF16), widened
// exactly.
func (k *Set) GPTLayerNormGradXAmax(s *cuda.Stream, dx, dy, x, mean, rstd, w, amax cuda.DevicePtr, rows, n int, bf16 bool) error {
	base, f32, bf := kernelGPTLNGradXAmax, []cuda.DevicePtr{dx, dy, x}, []cuda.DevicePtr{w}
	if bf16 {
		base, f32, bf = kernelGPTLNGradXBF16Amax, []cuda.DevicePtr{dx, x}, []cuda.DevicePtr{w, dy}
	}
	if err := zeroAmax(s, amax); err != nil {
		return err
	}
	return k.warpRows(s, base+rowVariant(n, f32, bf), rows, new(cuda.Args).Ptr(dx).Ptr(dy).Ptr(x).Ptr(mean).Ptr(rstd).
		Ptr(w).U64(uint64(rows)).U64(uint64(n)).Ptr(amax))
}

// GPTGELUGradAmax queues dx = dy·GELU'(x) for i < n, x bfloat16 (the kept
// fc), and unless amax is 0 sets the uint32 there to the amax key of the
// dx written. dx and dy are float32, GPTGELUGradBF16's bits; with bf16
// they are bfloat16, each dx the float32 value rounded to nearest even,
// the amax that of the rounded values.
func (k *Set) GPTGELUGradAmax(s *cuda.Stream, dx, dy, x, amax cuda.DevicePtr, n int, bf16 bool) error {
	name := kernelGPTGELUGradAmaxF32
	if bf16 {
		name = kernelGPTGELUGradAmaxBF
	}
	if err := zeroAmax(s, amax); err != nil {
		return err
	}
	return k.elementwise(s, name, n, new(cuda.Args).Ptr(dx).Ptr(dy).Ptr(x).U64(uint64(n)).Ptr(amax))
}

// GPTColumnSumBF16 is GPTColumnSum of a bfloat16 dy [rows, n], widened
// exactly: db[i] += Σ_r dy[r, i] in float32, in the same order.
func (k *Set) GPTColumnSumBF16(s *cuda.Stream, db, dy cuda.DevicePtr, rows, n int) error {
	return k.columnSums(s, kernelGPTColumnSumBF16, db, 0, rows, n, func(part cuda.DevicePtr) *cuda.Args {
		return new(cuda.Args).Ptr(part).Ptr(dy).U64(uint64(rows)).U64(uint64(n))
	})
}

// GPTLayerNormGradWBBF16 is GPTLayerNormGradWB of a bfloat16 dy, widened
// exactly.
func (k *Set) GPTLayerNormGradWBBF16(s *cuda.Stream, dw, db, dy, x, mean, rstd cuda.DevicePtr, rows, n int) error {
	return k.columnSums(s, kernelGPTLNGradWBBF16, dw, db, rows, n, func(part cuda.DevicePtr) *cuda.Args {
		return new(cuda.Args).Ptr(part).Ptr(dy).Ptr(x).Ptr(mean).Ptr(rstd).U64(uint64(rows)).U64(uint64(n))
	})
}

// GPTDYCast queues, for a linear layer's output gradient dy [rows, n]
// (float32, or bfloat16 with bf16, widened exactly), in one pass over dy:
//
//   - dst[r, i] = the code of format f of dy[r, i] * scale, the product
//     rounded to float32 (fp8.CastScaled's rule; gemm.Engine.Quantize's
//     codes at the same scale), scale the float32 at scale on the device;
//   - dstT[i, r] = the same code: the transposed operand [n, rows] the
//     weight gradient reads (gemm.LinearConfig.CallerCastsDY);
//   - db[i] += Σ_r dy[r, i] (the bias gradient), GPTColumnSum's bits (or
//     GPTColumnSumBF16's): the same sums in the same order.
//
// dst, dstT and dy must not overlap.
func (k *Set) GPTDYCast(s *cuda.Stream, dst, dstT, db, dy, scale cuda.DevicePtr, rows, n int, f fp8.Format, bf16 bool) error {
	suffix, ok := fusedFormats[f]
	if !ok {
		return fmt.Errorf("kernels: GPTDYCast to %v: want E4M3 or E5M2", f)
	}
	name := kernelGPTDYCast + suffix + "_f32"
	if bf16 {
		name = kernelGPTDYCast + suffix + "_bf16"
	}
	return k.columnSumsBy(s, name, dyCols, db, 0, rows, n, func(part cuda.DevicePtr) *cuda.Args {
		return new(cuda.Args).Ptr(dst).Ptr(dstT).Ptr(part).Ptr(dy).Ptr(scale).U64(uint64(rows)).U64(uint64(n))
	})
}
