// gpt.cuh: warp reductions and vector loads shared by the kernels of
// examples/gpt (gpt.cu, gptrows.cu, gptcols.cu, gpthead.cu).
#pragma once
#include "bf16.cuh"

namespace distopt {

// warp_sum returns the sum of v over the 32 lanes of a warp, to every lane
// (butterfly order: the same on every call).
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// warp_max returns the largest v over the 32 lanes of a warp, to every lane.
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Global index of a warp of a warp-per-row kernel, and the stride of its
// grid-stride loop over rows.
__device__ __forceinline__ u64 warp_index() { return thread_index() >> 5; }
__device__ __forceinline__ u64 warp_stride() { return grid_stride() >> 5; }

// bf16x4 widens the four bfloat16 at p (8-byte aligned) to a float4.
__device__ __forceinline__ float4 bf16x4(const u16 *p) {
    const uint2 v = *reinterpret_cast<const uint2 *>(p);
    return make_float4(bf16_to_f32(v.x & 0xffffu), bf16_to_f32(v.x >> 16), bf16_to_f32(v.y & 0xffffu),
                       bf16_to_f32(v.y >> 16));
}

// hsum4 returns (v.x + v.y) + (v.z + v.w).
__device__ __forceinline__ float hsum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

} // namespace distopt
