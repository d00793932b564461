// gpt.cuh: warp reductions, vector loads and the GELU shared by the
// kernels of examples/gpt (gpt.cu, gptrows.cu, gptcols.cu, gpthead.cu,
// gptfused.cu, gptbwd.cu).
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

// widen4 widens four bfloat16 packed in two words (the low halves first)
// to a float4.
__device__ __forceinline__ float4 widen4(uint2 v) {
    return make_float4(bf16_to_f32(v.x & 0xffffu), bf16_to_f32(v.x >> 16), bf16_to_f32(v.y & 0xffffu),
                       bf16_to_f32(v.y >> 16));
}

// bf16x4 widens the four bfloat16 at p (8-byte aligned) to a float4.
__device__ __forceinline__ float4 bf16x4(const u16 *p) { return widen4(*reinterpret_cast<const uint2 *>(p)); }

// bf16x8 widens the eight bfloat16 at p (16-byte aligned, one 16-byte
// load) to lo (the first four) and hi. The GELU kernels that read
// bfloat16 load eight a thread: with four (8 bytes) too few bytes were in
// flight. BenchmarkFusedProducers' gelu/current/epilogue (the two passes
// of GPTGELUFP8 at 8192 x 8192, then on one constant) ran at 48% of copy
// with four (163.6 us, H200), 85% with eight (136.5 us, H100); the 1.3B
// step did not move (scripts/gpu/NOTES.md, twenty-first session, call 6).
__device__ __forceinline__ void bf16x8(const u16 *p, float4 &lo, float4 &hi) {
    const uint4 q = *reinterpret_cast<const uint4 *>(p);
    lo = widen4(make_uint2(q.x, q.y));
    hi = widen4(make_uint2(q.z, q.w));
}

// bias_bf16x4 returns the four bfloat16 of v + w, each float32 sum rounded
// to nearest even, packed as widen4 reads them: what gpt_bias_add_bf16
// writes.
__device__ __forceinline__ uint2 bias_bf16x4(float4 v, float4 w) {
    return make_uint2(bf16_rn(v.x + w.x) | bf16_rn(v.y + w.y) << 16, bf16_rn(v.z + w.z) | bf16_rn(v.w + w.w) << 16);
}

// residual is a linear layer's bias and the residual connection of
// gpt_bias_residual: (y + b) + x.
__device__ __forceinline__ float residual(float y, float b, float x) { return (y + b) + x; }

// residual4 is residual of four consecutive elements.
__device__ __forceinline__ float4 residual4(float4 y, float4 b, float4 x) {
    return make_float4(residual(y.x, b.x, x.x), residual(y.y, b.y, x.y), residual(y.z, b.z, x.z),
                       residual(y.w, b.w, x.w));
}

// hsum4 returns (v.x + v.y) + (v.z + v.w).
__device__ __forceinline__ float hsum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

// f4 returns (v, v, v, v).
__device__ __forceinline__ float4 f4(float v) { return make_float4(v, v, v, v); }

#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f
// GELU_M2LOG2E is -2/ln(2): exp(-2u) = 2^(u*GELU_M2LOG2E).
#define GELU_M2LOG2E -2.8853900817779268f

// gelu_e returns exp(-2u) for u = sqrt(2/pi)*(v + 0.044715*v^3), and
// gelu_r 1/(1 + e): 0.5*(1 + tanh(u)) is the logistic 1/(1 + exp(-2u)).
// Both are the GPU's approximations (ex2.approx.ftz, rcp.approx.ftz):
// about ten instructions without a branch, where tanhf takes about 36 with
// two (GELU's kernels were bound by issuing them: 95 us for 150 MB at 16384
// x 3072 on an H100, about half of copy speed). Flushing subnormals
// changes nothing here: a subnormal e only adds to 1, and the reciprocal's
// argument is at least 1. e = +Inf (v below about -10) gives 0; NaN stays
// NaN.
__device__ __forceinline__ float gelu_e(float v) {
    const float u = GELU_K * (v + GELU_C * v * v * v);
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(u * GELU_M2LOG2E));
    return e;
}
__device__ __forceinline__ float gelu_r(float e) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
    return r;
}

// gelu is model.GELU: 0.5*v*(1 + tanh(sqrt(2/pi)*(v + 0.044715*v^3))) =
// v*s with s = 1/(1 + exp(-2u)), one definition for the kernels that write
// it (gpt.cu) and those that quantize it (gptfused.cu). Against the float64
// model over [-12, 12] (a float32 emulation in Go with the exponential off
// by 2^-22 and the reciprocal by 2^-23 either way) its largest relative
// error is 1.7e-6, where 0.5*v*(1 + tanh) with tanh rounded once gives
// 5.0e-5 (1 + t cancels for negative v).
__device__ __forceinline__ float gelu(float v) { return v * gelu_r(gelu_e(v)); }

// gelu_grad is model.GELUBackward: dy*GELU'(v), with 0.5*(1 + t) = s and
// 0.5*v*(1 - t*t) = 2*v*s*(1 - s), where 1 - s = e*s is taken without the
// cancellation of 1 - s near 1 (and is 1 where e is +Inf, whose product
// with s = 0 would be NaN). Largest relative error 7.8e-5 in the emulation
// above, against 3.0e-4 for the tanh form. One definition for the kernel
// that writes it in float32 (gpt.cu) and those that fold its amax or write
// it in bfloat16 (gptbwd.cu).
__device__ __forceinline__ float gelu_grad(float dy, float v) {
    const float e = gelu_e(v), s = gelu_r(e), c = e < __int_as_float(0x7f800000) ? e * s : 1.0f;
    return dy * (s + v * (2.0f * s * c) * GELU_K * (1.0f + 3.0f * GELU_C * v * v));
}

// amax4 returns the largest amax key (amax_bits) of four values.
__device__ __forceinline__ u32 amax4(float4 v) {
    return max(max(amax_bits(v.x), amax_bits(v.y)), max(amax_bits(v.z), amax_bits(v.w)));
}

} // namespace distopt
