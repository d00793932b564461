package kernels

import (
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
)

// kernelScales is the kernel of scales.cu.
const kernelScales = "scales_from_amax"

// ScalesFromAmax queues on s, for i < n: scale[i], scaleInv[i] =
// fp8.ScaleFromAmax(amax[i], f, margin, pow2), where amax holds the float32
// bits of the reduced amaxes (the sign bit ignored) and scale, scaleInv
// float32; nothing when ctl (a step control block, or 0) has its skip flag
// set. It panics for a negative n.
func (k *Set) ScalesFromAmax(s *cuda.Stream, scale, scaleInv, amax, ctl cuda.DevicePtr, n int, f fp8.Format, margin int, pow2 bool) error {
	const name = kernelScales
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 1, new(cuda.Args).Ptr(scale).Ptr(scaleInv).Ptr(amax).U64(uint64(n)).
		F32(f.Max()).F32(marginFactor(margin)).U32(b2u(pow2)).Ptr(ctl))
}
