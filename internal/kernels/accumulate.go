package kernels

import "github.com/distopt/distopt/internal/cuda"

// The kernels of accumulate.cu, by element type.
const (
	kernelAccumulateBF16 = "grad_accumulate_bf16"
	kernelAccumulateF32  = "grad_accumulate_f32"
)

// AccumulateGrad queues on s, for i < n: dst[i] = src[i] + dst[i], one
// float32 addition rounded to nearest, in bfloat16 (bf16 set: the sum
// rounded to the nearest bfloat16, every NaN 0x7fff) or float32, as
// collective.Reduce (Sum) of src and dst (NaN payloads of float32 aside).
// It panics for a negative n.
func (k *Set) AccumulateGrad(s *cuda.Stream, dst, src cuda.DevicePtr, n int, bf16 bool) error {
	name := kernelAccumulateF32
	if bf16 {
		name = kernelAccumulateBF16
	}
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 4, new(cuda.Args).Ptr(dst).Ptr(src).U64(uint64(n)))
}
