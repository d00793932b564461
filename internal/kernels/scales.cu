// scales.cu: the scales of a step derived on the device from its reduced
// amaxes, so that the host never reads the amaxes back (package optimizer's
// current-scaling and 128x128 tile recipes).
//
// scales_from_amax: for i < n, scale[i], inv[i] = fp8.ScaleFromAmax(amax
// bits amax[i] with the sign cleared, fmax, margin, pow2), mfac =
// float32(2^-margin) as the host computes it: the rule of scale_from_amax
// (segments.cuh), every operation a separately rounded float32 one; nothing
// when ctl (a step control block, or null) says the step is skipped.
#include "segments.cuh"
#include "stepctl.cuh"

using namespace distopt;

extern "C" __global__ void scales_from_amax(float *scale, float *inv, const u32 *amax, u64 n, float fmax, float mfac,
                                            u32 pow2, const StepCtl *ctl) {
    if (ctl_skip(ctl)) return;
    for (u64 i = thread_index(); i < n; i += grid_stride()) {
        float s, v;
        scale_from_amax(amax[i] & 0x7fffffffu, fmax, mfac, pow2 != 0, s, v);
        scale[i] = s, inv[i] = v;
    }
}
