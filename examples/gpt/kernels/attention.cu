// attention.cu: the softmax steps and layout changes of causal multi-head
// attention computed with batched GEMMs (examples/gpt/gpumodel/attention.go).
// The GEMMs write
// the scores s = q·kᵀ of every (batch, head) as n row-major matrices
// [t, t]; these kernels turn them into probabilities and, in the backward
// pass, turn the probabilities' gradient into the scores' gradient. Row i
// of each matrix reads only columns j <= i (the causal mask) and writes the
// whole row, zeros above the diagonal, so that the next GEMM may read full
// matrices.
//
// One warp per row. Every sum runs in a fixed order (each lane over its
// columns in increasing order, then a butterfly over the lanes), so results
// repeat bit for bit; no atomics. The "4" variants read and write float4
// (t a multiple of 4, 16-byte aligned rows) and keep the first groups of
// each lane's columns in registers between the two passes; the others take
// any t and read the row twice.
//
// Exponentials use __expf (ex2.approx: relative error about 2^-21 on the
// arguments here, all <= 0), far below the float32 GEMMs' rounding.
#include "bf16.cuh"

using namespace distopt;

namespace {

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ u64 warp_index() { return thread_index() >> 5; }
__device__ __forceinline__ u64 warp_stride() { return grid_stride() >> 5; }

// online_add folds x into a running maximum m and sum l of exp(x' - m).
__device__ __forceinline__ void online_add(float &m, float &l, float x) {
    if (x > m) {
        l = l * __expf(m - x) + 1.0f;
        m = x;
    } else {
        l += __expf(x - m);
    }
}

// online_combine merges the (m, l) of the 32 lanes, butterfly order: every
// lane ends with the row's maximum and sum of exp(x - max). A lane that saw
// no column has m = -inf and l = 0.
__device__ __forceinline__ void online_combine(float &m, float &l) {
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
        const float mn = fmaxf(m, m2);
        const float a = m == -INFINITY ? 0.0f : l * __expf(m - mn);
        const float b = m2 == -INFINITY ? 0.0f : l2 * __expf(m2 - mn);
        l = a + b;
        m = mn;
    }
}

__device__ __forceinline__ float comp(const float4 &v, int c) {
    return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}

// add4 folds the columns j0..j0+3 of v that are <= i, scaled.
__device__ __forceinline__ void add4(float &m, float &l, const float4 &v, u64 j0, u64 i, float scale) {
#pragma unroll
    for (int c = 0; c < 4; c++)
        if (j0 + c <= i) online_add(m, l, scale * comp(v, c));
}

__device__ __forceinline__ float prob(float s, u64 j, u64 i, float scale, float m, float inv) {
    return j <= i ? __expf(scale * s - m) * inv : 0.0f;
}

__device__ __forceinline__ float4 prob4(const float4 &v, u64 j0, u64 i, float scale, float m, float inv) {
    return make_float4(prob(v.x, j0, i, scale, m, inv), prob(v.y, j0 + 1, i, scale, m, inv),
                       prob(v.z, j0 + 2, i, scale, m, inv), prob(v.w, j0 + 3, i, scale, m, inv));
}

__device__ __forceinline__ float dot4(const float4 &p, const float4 &d, u64 j0, u64 i) {
    float s = 0;
#pragma unroll
    for (int c = 0; c < 4; c++)
        if (j0 + c <= i) s += comp(p, c) * comp(d, c);
    return s;
}

__device__ __forceinline__ float grad(float p, float dp, u64 j, u64 i, float scale, float dot) {
    return j <= i ? scale * p * (dp - dot) : 0.0f;
}

__device__ __forceinline__ float4 grad4(const float4 &p, const float4 &d, u64 j0, u64 i, float scale, float dot) {
    return make_float4(grad(p.x, d.x, j0, i, scale, dot), grad(p.y, d.y, j0 + 1, i, scale, dot),
                       grad(p.z, d.z, j0 + 2, i, scale, dot), grad(p.w, d.w, j0 + 3, i, scale, dot));
}

// Element access for the probabilities and gradients, which are float32
// or bfloat16 (round to nearest even): one element, or four consecutive
// (a float4, or 8 bytes of bfloat16).
__device__ __forceinline__ void put(float *p, float v) { *p = v; }
__device__ __forceinline__ void put(u16 *p, float v) { *p = (u16)bf16_rn(v); }
__device__ __forceinline__ float get(const float *p) { return *p; }
__device__ __forceinline__ float get(const u16 *p) { return bf16_to_f32(*p); }
__device__ __forceinline__ void put4(float *p, const float4 &v) { *reinterpret_cast<float4 *>(p) = v; }
__device__ __forceinline__ void put4(u16 *p, const float4 &v) {
    uint2 w;
    w.x = bf16_rn(v.x) | bf16_rn(v.y) << 16;
    w.y = bf16_rn(v.z) | bf16_rn(v.w) << 16;
    *reinterpret_cast<uint2 *>(p) = w;
}
__device__ __forceinline__ float4 get4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 get4(const u16 *p) {
    const uint2 w = *reinterpret_cast<const uint2 *>(p);
    return make_float4(bf16_to_f32(w.x & 0xffffu), bf16_to_f32(w.x >> 16), bf16_to_f32(w.y & 0xffffu),
                       bf16_to_f32(w.y >> 16));
}

// Groups of 4 columns each lane keeps in registers: rows up to 2048
// columns stay in registers in the forward kernel, 1024 in the backward
// (which keeps two).
constexpr int kCacheFwd = 16, kCacheBwd = 8;

// softmax_rows: the scalar kernel, any t.
template <typename P> __device__ void softmax_rows(P *p, const float *s, u64 n, u64 t, float scale) {
    const u32 lane = threadIdx.x & 31;
    for (u64 r = warp_index(); r < n * t; r += warp_stride()) {
        const u64 i = r % t;
        const float *sr = s + r * t;
        P *pr = p + r * t;
        float m = -INFINITY, l = 0;
        for (u64 j = lane; j <= i; j += 32) online_add(m, l, scale * sr[j]);
        online_combine(m, l);
        const float inv = 1.0f / l;
        for (u64 j = lane; j < t; j += 32) put(pr + j, prob(sr[j], j, i, scale, m, inv));
    }
}

// softmax_rows4: groups of 4 columns, t a multiple of 4, aligned rows.
template <typename P> __device__ void softmax_rows4(P *p, const float *s, u64 n, u64 t, float scale) {
    const u32 lane = threadIdx.x & 31;
    const u64 t4 = t / 4;
    for (u64 r = warp_index(); r < n * t; r += warp_stride()) {
        const u64 i = r % t, last = i / 4; // groups 0..last hold the columns j <= i
        const float *sr = s + r * t;
        P *pr = p + r * t;
        float4 c[kCacheFwd];
        float m = -INFINITY, l = 0;
#pragma unroll
        for (int u = 0; u < kCacheFwd; u++) {
            const u64 g = lane + 32 * (u64)u;
            if (g <= last) {
                c[u] = get4(sr + 4 * g);
                add4(m, l, c[u], 4 * g, i, scale);
            }
        }
        for (u64 g = lane + 32 * (u64)kCacheFwd; g <= last; g += 32) add4(m, l, get4(sr + 4 * g), 4 * g, i, scale);
        online_combine(m, l);
        const float inv = 1.0f / l;
        const float4 zero = make_float4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < kCacheFwd; u++) {
            const u64 g = lane + 32 * (u64)u;
            if (g < t4) put4(pr + 4 * g, g <= last ? prob4(c[u], 4 * g, i, scale, m, inv) : zero);
        }
        for (u64 g = lane + 32 * (u64)kCacheFwd; g < t4; g += 32)
            put4(pr + 4 * g, g <= last ? prob4(get4(sr + 4 * g), 4 * g, i, scale, m, inv) : zero);
    }
}

// softmax_grad_rows: the scalar kernel, any t.
template <typename P>
__device__ void softmax_grad_rows(P *ds, const P *p, const float *dp, u64 n, u64 t, float scale) {
    const u32 lane = threadIdx.x & 31;
    for (u64 r = warp_index(); r < n * t; r += warp_stride()) {
        const u64 i = r % t;
        const P *pr = p + r * t;
        const float *dpr = dp + r * t;
        P *dsr = ds + r * t;
        float dot = 0;
        for (u64 j = lane; j <= i; j += 32) dot += get(pr + j) * dpr[j];
        dot = warp_sum(dot);
        for (u64 j = lane; j < t; j += 32) put(dsr + j, j <= i ? grad(get(pr + j), dpr[j], j, i, scale, dot) : 0.0f);
    }
}

// softmax_grad_rows4: groups of 4 columns, t a multiple of 4, aligned rows.
template <typename P>
__device__ void softmax_grad_rows4(P *ds, const P *p, const float *dp, u64 n, u64 t, float scale) {
    const u32 lane = threadIdx.x & 31;
    const u64 t4 = t / 4;
    for (u64 r = warp_index(); r < n * t; r += warp_stride()) {
        const u64 i = r % t, last = i / 4;
        const P *pr = p + r * t;
        const float *dpr = dp + r * t;
        P *dsr = ds + r * t;
        float4 cp[kCacheBwd], cd[kCacheBwd];
        float dot = 0;
#pragma unroll
        for (int u = 0; u < kCacheBwd; u++) {
            const u64 g = lane + 32 * (u64)u;
            if (g <= last) {
                cp[u] = get4(pr + 4 * g);
                cd[u] = get4(dpr + 4 * g);
                dot += dot4(cp[u], cd[u], 4 * g, i);
            }
        }
        for (u64 g = lane + 32 * (u64)kCacheBwd; g <= last; g += 32)
            dot += dot4(get4(pr + 4 * g), get4(dpr + 4 * g), 4 * g, i);
        dot = warp_sum(dot);
        const float4 zero = make_float4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < kCacheBwd; u++) {
            const u64 g = lane + 32 * (u64)u;
            if (g < t4) put4(dsr + 4 * g, g <= last ? grad4(cp[u], cd[u], 4 * g, i, scale, dot) : zero);
        }
        for (u64 g = lane + 32 * (u64)kCacheBwd; g < t4; g += 32)
            put4(dsr + 4 * g, g <= last ? grad4(get4(pr + 4 * g), get4(dpr + 4 * g), 4 * g, i, scale, dot) : zero);
    }
}

// split_heads: see attn_split_heads below; T is the packed side's element
// type, S the row-major side's (float32 or bfloat16 each).
template <typename T, typename S>
__device__ void split_heads(T *dst, const S *src, u64 batch, u64 seq, u64 heads, u64 d, u64 ld, u64 off) {
    const u64 rows = batch * seq;
    const u32 h = (u32)(heads * d), dd = (u32)d;
    const bool vec = d % 4 == 0 && ld % 4 == 0 && off % 4 == 0 && aligned(dst, 4 * sizeof(T)) &&
                     aligned(src, 4 * sizeof(S));
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const u64 b = r / seq, t = r % seq;
        const S *in = src + r * ld + off;
        T *out = dst + (b * heads * seq + t) * d; // head 0 of row (b, t)
        if (vec) {
            for (u32 col = 4 * threadIdx.x; col < h; col += 4 * blockDim.x)
                put4(out + (u64)(col / dd) * seq * d + col % dd, get4(in + col));
        } else {
            for (u32 col = threadIdx.x; col < h; col += blockDim.x)
                put(out + (u64)(col / dd) * seq * d + col % dd, get(in + col));
        }
    }
}

} // namespace

// attn_softmax (model.CausalSoftmax), one warp per row r of the n matrices
// [t, t], i = r mod t: p[j] = exp(scale*s[j] - m) / sum_{k<=i} exp(scale*s[k]
// - m) for j <= i, m the maximum of scale*s[k] over k <= i; p[j] = 0 for
// j > i. s above the diagonal is not read. p may be s.
extern "C" __global__ void attn_softmax(float *p, const float *s, u64 n, u64 t, float scale) {
    softmax_rows(p, s, n, t, scale);
}

// attn_softmax4: attn_softmax for t a multiple of 4 and p, s 16-byte
// aligned, with float4 accesses.
extern "C" __global__ void attn_softmax4(float *p, const float *s, u64 n, u64 t, float scale) {
    softmax_rows4(p, s, n, t, scale);
}

// attn_softmax_bf16, attn_softmax4_bf16: the same with p in bfloat16
// (rounded to nearest even; p must not overlap s). The float4 variant
// needs p 8-byte aligned.
extern "C" __global__ void attn_softmax_bf16(u16 *p, const float *s, u64 n, u64 t, float scale) {
    softmax_rows(p, s, n, t, scale);
}
extern "C" __global__ void attn_softmax4_bf16(u16 *p, const float *s, u64 n, u64 t, float scale) {
    softmax_rows4(p, s, n, t, scale);
}

// attn_softmax_grad (model.CausalSoftmaxBackward), one warp per row:
// ds[j] = scale*p[j]*(dp[j] - sum_{k<=i} p[k]*dp[k]) for j <= i, 0 above
// the diagonal (p and dp there are not read). ds may be dp.
extern "C" __global__ void attn_softmax_grad(float *ds, const float *p, const float *dp, u64 n, u64 t,
                                             float scale) {
    softmax_grad_rows(ds, p, dp, n, t, scale);
}

// attn_softmax_grad4: attn_softmax_grad for t a multiple of 4 and ds, p, dp
// 16-byte aligned, with float4 accesses.
extern "C" __global__ void attn_softmax_grad4(float *ds, const float *p, const float *dp, u64 n, u64 t,
                                              float scale) {
    softmax_grad_rows4(ds, p, dp, n, t, scale);
}

// attn_softmax_grad_bf16, attn_softmax_grad4_bf16: the same with p and ds
// in bfloat16 (dp float32; ds must not overlap dp; the float4 variant needs
// ds and p 8-byte aligned, dp 16).
extern "C" __global__ void attn_softmax_grad_bf16(u16 *ds, const u16 *p, const float *dp, u64 n, u64 t,
                                                  float scale) {
    softmax_grad_rows(ds, p, dp, n, t, scale);
}
extern "C" __global__ void attn_softmax_grad4_bf16(u16 *ds, const u16 *p, const float *dp, u64 n, u64 t,
                                                   float scale) {
    softmax_grad_rows4(ds, p, dp, n, t, scale);
}

// Layout changes between the row-major activations of the model, rows
// (b, t) of width ld holding the heads side by side from column off (head
// hh in columns off + hh*d .. off + hh*d + d - 1), and the packed layout the
// batched GEMMs read with one batch stride, [batch, heads, seq, d]. One
// block per row (grid-stride); four elements at a time when d, ld and off
// are multiples of 4 and both pointers aligned to four elements (16 bytes
// of float32, 8 of bfloat16). Exact copies but for the rounding to
// bfloat16 where the source is float32.

// attn_split_heads: dst[((b*heads + hh)*seq + t)*d + c] =
// src[(b*seq + t)*ld + off + hh*d + c].
extern "C" __global__ void attn_split_heads(float *dst, const float *src, u64 batch, u64 seq, u64 heads, u64 d,
                                            u64 ld, u64 off) {
    split_heads(dst, src, batch, seq, heads, d, ld, off);
}

// attn_split_heads_bf16: attn_split_heads into bfloat16 (rounded to nearest
// even), for GEMMs with bfloat16 inputs.
extern "C" __global__ void attn_split_heads_bf16(u16 *dst, const float *src, u64 batch, u64 seq, u64 heads, u64 d,
                                                 u64 ld, u64 off) {
    split_heads(dst, src, batch, seq, heads, d, ld, off);
}

// attn_split_heads_from_bf16: attn_split_heads of a bfloat16 src into
// float32 (exact widening), for the float32 GEMMs on the model's bfloat16
// qkv.
extern "C" __global__ void attn_split_heads_from_bf16(float *dst, const u16 *src, u64 batch, u64 seq, u64 heads,
                                                      u64 d, u64 ld, u64 off) {
    split_heads(dst, src, batch, seq, heads, d, ld, off);
}

// attn_split_heads_bf16_from_bf16: attn_split_heads with both sides
// bfloat16 (an exact copy, but every NaN becomes 0x7fff), for the fused
// kernels and bfloat16 GEMMs on the model's bfloat16 qkv.
extern "C" __global__ void attn_split_heads_bf16_from_bf16(u16 *dst, const u16 *src, u64 batch, u64 seq, u64 heads,
                                                           u64 d, u64 ld, u64 off) {
    split_heads(dst, src, batch, seq, heads, d, ld, off);
}

// attn_merge_heads, the inverse: dst[(b*seq + t)*ld + off + hh*d + c] =
// src[((b*heads + hh)*seq + t)*d + c]; the other columns of dst are not
// written.
extern "C" __global__ void attn_merge_heads(float *dst, const float *src, u64 batch, u64 seq, u64 heads, u64 d,
                                            u64 ld, u64 off) {
    const u64 rows = batch * seq;
    const u32 h = (u32)(heads * d), dd = (u32)d;
    const bool vec = d % 4 == 0 && ld % 4 == 0 && off % 4 == 0 && aligned(dst, 16) && aligned(src, 16);
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const u64 b = r / seq, t = r % seq;
        float *out = dst + r * ld + off;
        const float *in = src + (b * heads * seq + t) * d;
        if (vec) {
            for (u32 col = 4 * threadIdx.x; col < h; col += 4 * blockDim.x)
                *reinterpret_cast<float4 *>(out + col) =
                    *reinterpret_cast<const float4 *>(in + (u64)(col / dd) * seq * d + col % dd);
        } else {
            for (u32 col = threadIdx.x; col < h; col += blockDim.x) out[col] = in[(u64)(col / dd) * seq * d + col % dd];
        }
    }
}
