package kernels

import (
	"fmt"

	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/internal/cuda"
)

// kernelDelayed is the kernel of delayed.cu.
const kernelDelayed = "delayed_scales"

// DelayedScales queues on s the scales of delayed scaling after a step,
// for i < n (delayed.cu), unless ctl (a step control block, or 0) has its
// skip flag set: cast[i] = scale[i], scaleInv[i] = 1/scale[i]; row i of
// hist (l float32 values, oldest first) drops its oldest value and appends
// amax[i] (float32 bits of the reduced amax); scale[i] =
// fp8.ScaleFromAmax of the row's reduction (its largest |value|, or the
// value appended when recent), f, margin, pow2. One warp per row. It
// panics for a negative n or l < 1.
func (k *Set) DelayedScales(s *cuda.Stream, scale, scaleInv, cast, hist, amax, ctl cuda.DevicePtr, n, l int, f fp8.Format, margin int, pow2, recent bool) error {
	const name = kernelDelayed
	if l < 1 {
		panic(fmt.Sprintf("kernels: %s with histories of length %d", name, l))
	}
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, 32*n, 1, new(cuda.Args).Ptr(scale).Ptr(scaleInv).Ptr(cast).Ptr(hist).Ptr(amax).U64(uint64(n)).
		U32(uint32(l)).F32(f.Max()).F32(marginFactor(margin)).U32(b2u(pow2)).U32(b2u(recent)).Ptr(ctl))
}
