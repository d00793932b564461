package kernels

import "github.com/distopt/distopt/internal/cuda"

// kernelBF16 is the kernel of bf16.cu.
const kernelBF16 = "bf16_from_f32"

// BF16FromFloat32 queues on s, for i < n: dst[i] = bf16.FromFloat32(src[i]),
// where src holds float32 and dst bfloat16 bits: round to nearest even,
// overflow to ±Inf, every NaN to 0x7fff (the hardware's cvt.rn.bf16.f32). It
// panics for a negative n.
func (k *Set) BF16FromFloat32(s *cuda.Stream, dst, src cuda.DevicePtr, n int) error {
	const name = kernelBF16
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 4, new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(n)))
}
