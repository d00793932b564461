// gptnorm.cuh: the pieces of model.LayerNorm (one warp per row) that the
// kernels writing its output (gpt_layernorm of gpt.cu, gpt_layernorm_v* of
// gptrows.cu) share with those quantizing it for the next linear layer
// (gptfused.cu), so that both compute the same bits: the row's mean and
// rstd = 1/sqrt(var + eps) (biased variance, from the deviations), held
// in registers (ln_stats_regs) or read from memory (ln_stats_any), and
// the output (x-mean)*rstd*w + b (ln_out).
#pragma once
#include "gpt.cuh"

namespace distopt {

// ln_out is one output element, each operation rounded in turn.
__device__ __forceinline__ float ln_out(float x, float m, float rs, float w, float b) { return (x - m) * rs * w + b; }

// ln_out4 is ln_out of four consecutive elements.
__device__ __forceinline__ float4 ln_out4(float4 x, float m, float rs, float4 w, float4 b) {
    return make_float4(ln_out(x.x, m, rs, w.x, b.x), ln_out(x.y, m, rs, w.y, b.y), ln_out(x.z, m, rs, w.z, b.z),
                       ln_out(x.w, m, rs, w.w, b.w));
}

// ln_load_regs loads the float4s lane, lane+32, ... of the row at xr (n4
// float4s) into v, zeros past the row's end.
template <int V> __device__ __forceinline__ void ln_load_regs(float4 (&v)[V], const float4 *xr, u32 lane, u64 n4) {
#pragma unroll
    for (int j = 0; j < V; j++) {
        const u64 c = lane + 32 * j;
        v[j] = c < n4 ? xr[c] : f4(0);
    }
}

// ln_stats_regs returns the mean and rstd of a row of n = 4*n4 floats that
// the warp holds as ln_load_regs lays it out: each lane sums its float4s
// in order, then the warp butterfly.
template <int V>
__device__ __forceinline__ void ln_stats_regs(const float4 (&v)[V], u32 lane, u64 n4, u64 n, float eps, float &m,
                                              float &rs) {
    float s = 0;
#pragma unroll
    for (int j = 0; j < V; j++) s += hsum4(v[j]);
    m = warp_sum(s) / (float)n;
    float q = 0;
#pragma unroll
    for (int j = 0; j < V; j++) {
        if (lane + 32 * j < n4) {
            const float4 d = make_float4(v[j].x - m, v[j].y - m, v[j].z - m, v[j].w - m);
            q += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);
        }
    }
    rs = 1.0f / sqrtf(warp_sum(q) / (float)n + eps);
}

// ln_stats_any returns the mean and rstd of the row of n floats at xr,
// read from memory: lane l sums elements l, l+32, ... in order, then the
// warp butterfly.
__device__ __forceinline__ void ln_stats_any(const float *xr, u32 lane, u64 n, float eps, float &m, float &rs) {
    float s = 0;
    for (u64 i = lane; i < n; i += 32) s += xr[i];
    m = warp_sum(s) / (float)n;
    float v = 0;
    for (u64 i = lane; i < n; i += 32) {
        const float d = xr[i] - m;
        v += d * d;
    }
    rs = 1.0f / sqrtf(warp_sum(v) / (float)n + eps);
}

} // namespace distopt
