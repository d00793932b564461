// bf16.cu: float32 -> bfloat16 rounding.
//
// bf16_from_f32: dst[i] = the bfloat16 nearest src[i] (ties to even), by the
// hardware instruction cvt.rn.bf16.f32 (compute capability 8.0 and up):
// overflow rounds to +-Inf as IEEE says, every NaN gives 0x7fff. This is
// fp8.BF16FromFloat32.
#include "bf16.cuh"

using namespace distopt;

extern "C" __global__ void bf16_from_f32(u16 *dst, const float *src, u64 n) {
    const u64 t = thread_index(), stride = grid_stride();
    const u64 n4 = aligned(src, 16) && aligned(dst, 8) ? n / 4 : 0;
    for (u64 i = t; i < n4; i += stride) {
        const float4 x = reinterpret_cast<const float4 *>(src)[i];
        reinterpret_cast<uint2 *>(dst)[i] = make_uint2(bf16_rn(x.x) | bf16_rn(x.y) << 16, bf16_rn(x.z) | bf16_rn(x.w) << 16);
    }
    for (u64 i = 4 * n4 + t; i < n; i += stride) dst[i] = (u16)bf16_rn(src[i]);
}
