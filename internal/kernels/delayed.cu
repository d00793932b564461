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
//
// One warp per row. The row moves down by one 128 keys at a time: each lane
// reads its four keys of the group (row[j+1]), the warp synchronises, then
// each lane writes them (row[j]). A group writes row[j0 .. j0+127] and reads
// row[j0+1 .. j0+128]; the next group reads only above j0+128, so no read
// sees a key moved already, whatever the order of the groups' memory
// operations. The row's largest key is a warp reduction: the same maximum,
// hence the same bits, as a thread's serial loop. (A thread per row, as
// before, spent about 170 us a step at l = 1024 under ncu on an H100: one
// dependent L2 access per key.)
#include "segments.cuh"
#include "stepctl.cuh"

using namespace distopt;

extern "C" __global__ void delayed_scales(float *scale, float *inv, float *cast, u32 *hist, const u32 *amax, u64 n,
                                          u32 l, float fmax, float mfac, u32 pow2, u32 recent, const StepCtl *ctl) {
    if (ctl_skip(ctl)) return;
    const u32 lane = threadIdx.x & 31;
    for (u64 i = thread_index() >> 5; i < n; i += grid_stride() >> 5) {
        u32 *row = hist + i * l;
        u32 m = 0;
        for (u32 j0 = 0; j0 + 1 < l; j0 += 128) {
            u32 v[4];
#pragma unroll
            for (u32 t = 0; t < 4; t++) {
                const u32 j = j0 + 32 * t + lane;
                v[t] = j + 1 < l ? row[j + 1] : 0;
            }
            __syncwarp();
#pragma unroll
            for (u32 t = 0; t < 4; t++) {
                const u32 j = j0 + 32 * t + lane;
                if (j + 1 < l) {
                    row[j] = v[t];
                    m = max(m, v[t] & 0x7fffffffu);
                }
            }
        }
        m = __reduce_max_sync(0xffffffffu, m);
        if (lane == 0) {
            const float s0 = scale[i];
            cast[i] = s0;
            inv[i] = __fdiv_rn(1.0f, s0);
            const u32 a = amax[i];
            row[l - 1] = a;
            m = max(m, a & 0x7fffffffu);
            float s, v;
            scale_from_amax(recent ? (a & 0x7fffffffu) : m, fmax, mfac, pow2 != 0, s, v);
            scale[i] = s;
        }
    }
}
