// delayed.cu: the scales of delayed scaling after a step, derived on the
// device from the step's reduced amaxes and the amax histories kept there,
// so that the host neither waits for nor reads the amaxes (package
// optimizer's scaleState.reduced for a step, castStep).
//
// delayed_scales: for i < n, unless ctl (a step control block, or null)
// says the step is skipped:
//
//   cast[i] = scale[i]; inv[i] = 1/scale[i]   (the bytes the update cast)
//   row i of hist (l values, oldest first) drops its oldest value and
//     appends amax[i] (fp8.AmaxHistory.Push)
//   scale[i] = fp8.ScaleFromAmax(reduced row, fmax, margin, pow2), the
//     reduction the largest key of the row (fp8.MaxAmax from +0) or, when
//     recent, the value just appended (fp8.AmaxHistory.Reduced)
//
// every float operation a separately rounded float32 one (scale_from_amax
// of segments.cuh; __fdiv_rn).
#include "segments.cuh"
#include "stepctl.cuh"

using namespace distopt;

extern "C" __global__ void delayed_scales(float *scale, float *inv, float *cast, u32 *hist, const u32 *amax, u64 n,
                                          u32 l, float fmax, float mfac, u32 pow2, u32 recent, const StepCtl *ctl) {
    if (ctl_skip(ctl)) return;
    for (u64 i = thread_index(); i < n; i += grid_stride()) {
        const float s0 = scale[i];
        cast[i] = s0;
        inv[i] = __fdiv_rn(1.0f, s0);
        u32 *row = hist + i * l;
        u32 m = 0;
        for (u32 j = 0; j + 1 < l; j++) {
            const u32 v = row[j + 1];
            row[j] = v;
            m = max(m, v & 0x7fffffffu);
        }
        const u32 a = amax[i];
        row[l - 1] = a;
        m = max(m, a & 0x7fffffffu);
        float s, v;
        scale_from_amax(recent ? (a & 0x7fffffffu) : m, fmax, mfac, pow2 != 0, s, v);
        scale[i] = s;
    }
}
