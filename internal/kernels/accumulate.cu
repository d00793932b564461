// accumulate.cu: the accumulation of a gradient shard into another (sharded
// gradients over several micro-batches): dst[i] = src[i] + dst[i] for
// i < n, one float32 addition rounded to nearest, as collective.Reduce
// (Sum) of the two: bfloat16 operands widened exactly, the sum rounded to
// the nearest bfloat16 (ties to even, overflow to +-Inf, every NaN 0x7fff:
// bf16.FromFloat32); float32 operands added as they are (a NaN's payload
// aside: the GPU's NaN is 0x7fffffff).
#include "bf16.cuh"

using namespace distopt;

extern "C" __global__ void grad_accumulate_bf16(u16 *dst, const u16 *src, u64 n) {
    const u64 t = thread_index(), stride = grid_stride();
    const u64 n4 = aligned(src, 8) && aligned(dst, 8) ? n / 4 : 0;
    for (u64 i = t; i < n4; i += stride) {
        const uint2 a = reinterpret_cast<const uint2 *>(src)[i], b = reinterpret_cast<const uint2 *>(dst)[i];
        u32 out[2];
#pragma unroll
        for (int w = 0; w < 2; w++) {
            const u32 x = w ? a.y : a.x, y = w ? b.y : b.x;
            const u32 lo = bf16_rn(__fadd_rn(bf16_to_f32(x & 0xffffu), bf16_to_f32(y & 0xffffu)));
            const u32 hi = bf16_rn(__fadd_rn(bf16_to_f32(x >> 16), bf16_to_f32(y >> 16)));
            out[w] = lo | hi << 16;
        }
        reinterpret_cast<uint2 *>(dst)[i] = make_uint2(out[0], out[1]);
    }
    for (u64 i = 4 * n4 + t; i < n; i += stride) dst[i] = (u16)bf16_rn(__fadd_rn(bf16_to_f32(src[i]), bf16_to_f32(dst[i])));
}

extern "C" __global__ void grad_accumulate_f32(float *dst, const float *src, u64 n) {
    const u64 t = thread_index(), stride = grid_stride();
    const u64 n4 = aligned(src, 16) && aligned(dst, 16) ? n / 4 : 0;
    for (u64 i = t; i < n4; i += stride) {
        const float4 a = reinterpret_cast<const float4 *>(src)[i], b = reinterpret_cast<const float4 *>(dst)[i];
        reinterpret_cast<float4 *>(dst)[i] =
            make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
    }
    for (u64 i = 4 * n4 + t; i < n; i += stride) dst[i] = __fadd_rn(src[i], dst[i]);
}
