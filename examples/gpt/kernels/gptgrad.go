package kernels

import "github.com/distopt/distopt/cuda"

// kernelGPTGradAccBF16 is the kernel of gptgrad.cu.
const kernelGPTGradAccBF16 = "gpt_grad_accumulate_bf16"

// gradKernels lists the kernels of gptgrad.cu.
func gradKernels() []string { return []string{kernelGPTGradAccBF16} }

// GPTAccumulateBF16 queues dst[i] = bf16(f32(dst[i]) + src[i]) for i < n:
// a float32 gradient src added into a bfloat16 gradient view dst, the
// float32 sum rounded once to the nearest bfloat16 (ties to even; overflow
// to ±Inf; NaN gives 0x7fff), as bf16.FromFloat32 does on the host. dst and
// src must not overlap.
func (k *Set) GPTAccumulateBF16(s *cuda.Stream, dst, src cuda.DevicePtr, n int) error {
	return k.elementwise(s, kernelGPTGradAccBF16, n, new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(n)))
}
