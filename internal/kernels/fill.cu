// fill.cu: filling device buffers.
//
// fill_iota_u32: dst[i] = base + i (mod 2^32) for i < n. With dst viewed as
// float32 this enumerates bit patterns, which is how the exhaustive tests
// produce every float32 on the device.
#include "common.cuh"

using namespace distopt;

extern "C" __global__ void fill_iota_u32(u32 *dst, u32 base, u64 n) {
    const u64 t = thread_index(), stride = grid_stride();
    const u64 n4 = aligned(dst, 16) ? n / 4 : 0;
    for (u64 i = t; i < n4; i += stride) {
        const u32 v = base + (u32)(4 * i);
        reinterpret_cast<uint4 *>(dst)[i] = make_uint4(v, v + 1, v + 2, v + 3);
    }
    for (u64 i = 4 * n4 + t; i < n; i += stride) dst[i] = base + (u32)i;
}
