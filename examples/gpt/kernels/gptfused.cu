// gptfused.cu: the producers of examples/gpt's FP8 linear inputs fused
// with their quantization. Unfused, LayerNorm and GELU write float32
// outputs that package gemm then reads twice (quant_amax, then quant_cast
// of internal/kernels/quantize.cu) or once (quant_rows128). Here:
//
//   - per tensor (fp8.TensorCurrent), two passes: gpt_ln_amax (LayerNorm
//     statistics, optionally after the previous linear layer's bias and
//     residual connection) or gpt_bias_gelu_amax (the bias and bfloat16
//     rounding of fc) folds the amax of the output without writing it;
//     gpt_ln_cast or gpt_gelu_cast recomputes the output and writes its
//     codes with the scale quant_scale derives from that amax;
//   - 1x128 blocks (fp8.Block1x128, gemm's Rows128 layout), one pass:
//     gpt_ln_rows128 and gpt_bias_gelu_rows128 cast each block as soon as
//     the warp holds it.
//
//   - per tensor with delayed scaling (gpumodel's delayed activations),
//     one pass: gpt_ln_delayed and gpt_(bias_)gelu_delayed cast with a
//     scale derived from earlier amaxes (gpt_act_scales) and fold the
//     output's amax for the next one, so no pass reads a tensor only for
//     its amax.
//
// When the GEMM's epilogue wrote fc with its bias in bfloat16
// (gpumodel's Options.Epilogue), gpt_gelu_amax and gpt_gelu_rows128 read
// it as it is: the same GELU and cast, without the bias.
//
// The outputs are computed by the very device functions of the unfused
// kernels (gptnorm.cuh, gpt.cuh), and the scales and codes by those of
// quantize.cu (scale_from_amax, encode): the codes and scales are those of
// the unfused path, bit for bit. Kernels with the suffix _v4, _v8 or _v16
// hold the row in registers like gptrows.cu's; the others take any width
// like gpt.cu's gpt_layernorm, whose statistics they share.
#include "gptnorm.cuh"
#include "segments.cuh"

using namespace distopt;

namespace {

// tensor_scale returns the scale quant_scale derives from the amax key at
// amax (fp8.ScaleFromAmax), every thread computing it; thread 0 writes its
// inverse to scale_inv.
__device__ __forceinline__ float tensor_scale(const u32 *amax, float *scale_inv, float fmax, float mfac, u32 pow2) {
    float s, inv;
    scale_from_amax(*amax & 0x7fffffffu, fmax, mfac, pow2 != 0, s, inv);
    if (thread_index() == 0) *scale_inv = inv;
    return s;
}

// delayed_scale returns the scale at scale (delayed scaling: derived from
// earlier amaxes by gpt_act_scales); thread 0 writes its inverse to
// scale_inv, the bits tensor_scale writes for the same scale.
__device__ __forceinline__ float delayed_scale(const float *scale, float *scale_inv) {
    const float s = *scale;
    if (thread_index() == 0) *scale_inv = __frcp_rn(s);
    return s;
}

// scale4 returns the four values of o times s, each rounded once.
__device__ __forceinline__ float4 scale4(float4 o, float s) {
    return make_float4(__fmul_rn(o.x, s), __fmul_rn(o.y, s), __fmul_rn(o.z, s), __fmul_rn(o.w, s));
}

// cast_block casts one 1x128 block that the warp holds as quant_rows128
// does: lane l's values y[0..cnt) are the block's elements 4l.., at dst + i
// (with vec, one aligned word: cnt is 0 or 4); the block's amax gives the
// scale (fp8.ScaleFromAmax), lane 0 writes its inverse to *inv_out.
template <Fp8 F>
__device__ __forceinline__ void cast_block(u8 *dst, u64 i, int cnt, bool vec, float y[4], float *inv_out, float fmax,
                                           float mfac, u32 pow2) {
    const u32 k = __reduce_max_sync(FULL, keys4(y, cnt));
    float s, inv;
    scale_from_amax(k, fmax, mfac, pow2 != 0, s, inv);
#pragma unroll
    for (int j = 0; j < 4; j++) y[j] = __fmul_rn(y[j], s);
    if (cnt > 0) cast_store<F>(dst, i, cnt, vec, y);
    if ((threadIdx.x & 31) == 0) *inv_out = inv;
}

// load4 returns the four values at p widened to float32: one vector load
// when p is aligned for it, four loads otherwise.
__device__ __forceinline__ float4 load4(const float *p) {
    return aligned(p, 16) ? *reinterpret_cast<const float4 *>(p) : make_float4(p[0], p[1], p[2], p[3]);
}
__device__ __forceinline__ float4 load4(const u16 *p) {
    return aligned(p, 8) ? bf16x4(p)
                         : make_float4(bf16_to_f32(p[0]), bf16_to_f32(p[1]), bf16_to_f32(p[2]), bf16_to_f32(p[3]));
}

// ln_row loads row r of x into the warp's registers and returns its
// statistics. When xin is not null, x holds the previous linear layer's
// product and becomes the residual stream first: x = residual(x, bias,
// xin), written back (gpt_bias_residual). Only x, w and b need the
// alignment of gptrows.cu (the launcher picks the kernel as
// GPTLayerNorm does, from those alone).
template <int V>
__device__ __forceinline__ void ln_row(float4 (&v)[V], float &m, float &rs, float *x, const float *xin,
                                       const u16 *bias, u64 r, u32 lane, u64 n, float eps) {
    const u64 n4 = n >> 2;
    float4 *xr = reinterpret_cast<float4 *>(x + r * n);
    ln_load_regs<V>(v, xr, lane, n4);
    if (xin != nullptr) {
#pragma unroll
        for (int j = 0; j < V; j++) {
            const u64 c = lane + 32 * j;
            if (c < n4) xr[c] = v[j] = residual4(v[j], load4(bias + 4 * c), load4(xin + r * n + 4 * c));
        }
    }
    ln_stats_regs<V>(v, lane, n4, n, eps, m, rs);
}

// ln_row_any is ln_row for rows of any width, read from memory. The
// residual stream's elements are written lane-strided (lane l: l, l+32,
// ...); the warp synchronizes before the row is read back in another
// order (1x128 blocks).
__device__ __forceinline__ void ln_row_any(float &m, float &rs, float *x, const float *xin, const u16 *bias, u64 r,
                                           u32 lane, u64 n, float eps) {
    float *xr = x + r * n;
    if (xin != nullptr) {
        for (u64 i = lane; i < n; i += 32) xr[i] = residual(xr[i], bf16_to_f32(bias[i]), xin[r * n + i]);
        __syncwarp();
    }
    ln_stats_any(xr, lane, n, eps, m, rs);
}

// ln_each_row runs ln_row over the warp's rows, hands each float4 c =
// lane + 32j of the LayerNorm's output to f(r, j, c, y, ok) (ok false past
// the row's end, y then zero; f is called for every lane of a float4 j
// holding any of the row, so that j numbers the row's 1x128 blocks), and
// writes the row's mean and rstd.
template <int V, class F>
__device__ __forceinline__ void ln_each_row(float *mean, float *rstd, float *x, const float *xin, const u16 *bias,
                                            const u16 *w, const u16 *b, u64 rows, u64 n, float eps, F &f) {
    const u32 lane = threadIdx.x & 31;
    const u64 n4 = n >> 2;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        float4 v[V];
        float m, rs;
        ln_row<V>(v, m, rs, x, xin, bias, r, lane, n, eps);
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (32 * j >= n4) continue; // the same for the whole warp
            const u64 c = lane + 32 * j;
            const bool ok = c < n4;
            f(r, j, c, ok ? ln_out4(v[j], m, rs, bf16x4(w + 4 * c), bf16x4(b + 4 * c)) : f4(0), ok);
        }
        if (lane == 0) mean[r] = m, rstd[r] = rs;
    }
}

// AmaxSink folds the amax key of the values it is handed into k.
struct AmaxSink {
    u32 k;
    __device__ __forceinline__ void operator()(u64, int, u64, float4 y, bool ok) {
        if (ok) k = max(k, amax4(y));
    }
};

// Rows128Sink casts the 1x128 blocks of rows of n it is handed (block j of
// row r: the warp's float4s j), its scale_inv to si[j*rows + r].
template <Fp8 F> struct Rows128Sink {
    u8 *dst;
    float *si;
    u64 rows, n;
    float fmax, mfac;
    u32 pow2;
    __device__ __forceinline__ void operator()(u64 r, int j, u64 c, float4 o, bool ok) {
        float y[4] = {o.x, o.y, o.z, o.w};
        cast_block<F>(dst, r * n + 4 * c, ok ? 4 : 0, true, y, si + j * rows + r, fmax, mfac, pow2);
    }
};

// DelayedSink casts the rows of n it is handed with the per-tensor scale s
// (delayed scaling), a word at a time when vec (dst 4-byte aligned), and
// folds their amax key into k.
template <Fp8 F> struct DelayedSink {
    u8 *dst;
    u64 n;
    float s;
    bool vec;
    u32 k;
    __device__ __forceinline__ void operator()(u64 r, int, u64 c, float4 o, bool ok) {
        if (!ok) return;
        k = max(k, amax4(o));
        const float4 y4 = scale4(o, s);
        const float y[4] = {y4.x, y4.y, y4.z, y4.w};
        cast_store<F>(dst, r * n + 4 * c, 4, vec, y);
    }
};

// ln_amax_any is gpt_ln_amax_v*'s work (ln_each_row with AmaxSink) for
// rows of any width: the statistics of each row (and the residual stream,
// see ln_row), and the amax of the LayerNorm's output folded into *amax.
__device__ __forceinline__ void ln_amax_any(float *mean, float *rstd, u32 *amax, float *x, const float *xin,
                                            const u16 *bias, const u16 *w, const u16 *b, u64 rows, u64 n,
                                            float eps) {
    const u32 lane = threadIdx.x & 31;
    u32 k = 0;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        float m, rs;
        ln_row_any(m, rs, x, xin, bias, r, lane, n, eps);
        for (u64 i = lane; i < n; i += 32)
            k = max(k, amax_bits(ln_out(x[r * n + i], m, rs, bf16_to_f32(w[i]), bf16_to_f32(b[i]))));
        if (lane == 0) mean[r] = m, rstd[r] = rs;
    }
    block_max_atomic(amax, k);
}

// ln_rows128_any is gpt_ln_rows128_*_v*'s work (ln_each_row with
// Rows128Sink) for rows of any width: lane l takes elements 4l..4l+3 of
// each 1x128 block, as quant_rows128.
template <Fp8 F>
__device__ __forceinline__ void ln_rows128_any(u8 *dst, float *si, float *mean, float *rstd, float *x,
                                               const float *xin, const u16 *bias, const u16 *w, const u16 *b,
                                               u64 rows, u64 n, float eps, float fmax, float mfac, u32 pow2) {
    const u32 lane = threadIdx.x & 31;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        float m, rs;
        ln_row_any(m, rs, x, xin, bias, r, lane, n, eps);
        for (u64 c0 = 0; c0 < n; c0 += 128) {
            const u64 c = c0 + 4 * lane;
            const int cnt = c < n ? (int)min(n - c, (u64)4) : 0;
            float y[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                y[j] = j < cnt ? ln_out(x[r * n + c + j], m, rs, bf16_to_f32(w[c + j]), bf16_to_f32(b[c + j])) : 0.0f;
            cast_block<F>(dst, r * n + c, cnt, false, y, si + (c0 / 128) * rows + r, fmax, mfac, pow2);
        }
        if (lane == 0) mean[r] = m, rstd[r] = rs;
    }
}

// ln_delayed_any is gpt_ln_delayed_*_v*'s work (ln_each_row with
// DelayedSink) for rows of any width: the statistics, the output's codes
// cast with the scale at scale (delayed_scale), its amax folded into
// *amax (not zeroed), in one pass.
template <Fp8 F>
__device__ __forceinline__ void ln_delayed_any(u8 *dst, float *si, const float *scale, u32 *amax, float *mean,
                                               float *rstd, float *x, const float *xin, const u16 *bias, const u16 *w,
                                               const u16 *b, u64 rows, u64 n, float eps) {
    const float s = delayed_scale(scale, si);
    const u32 lane = threadIdx.x & 31;
    u32 k = 0;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        float m, rs;
        ln_row_any(m, rs, x, xin, bias, r, lane, n, eps);
        for (u64 i = lane; i < n; i += 32) {
            const float o = ln_out(x[r * n + i], m, rs, bf16_to_f32(w[i]), bf16_to_f32(b[i]));
            k = max(k, amax_bits(o));
            dst[r * n + i] = (u8)encode<F>(__fmul_rn(o, s));
        }
        if (lane == 0) mean[r] = m, rstd[r] = rs;
    }
    block_max_atomic(amax, k);
}

// ln_cast writes the codes of the LayerNorm output of x [rows, n] from the
// kept mean and rstd, scaled by tensor_scale; one warp per row.
template <Fp8 F>
__device__ __forceinline__ void ln_cast(u8 *dst, float *si, const u32 *amax, const float *x, const float *mean,
                                        const float *rstd, const u16 *w, const u16 *b, u64 rows, u64 n, float fmax,
                                        float mfac, u32 pow2) {
    const float s = tensor_scale(amax, si, fmax, mfac, pow2);
    const u32 lane = threadIdx.x & 31;
    const bool vec = (n & 3) == 0 && aligned(dst, 4) && aligned(x, 16) && aligned(w, 8) && aligned(b, 8);
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        const float m = mean[r], rs = rstd[r];
        if (vec) {
            const float4 *xr = reinterpret_cast<const float4 *>(x + r * n);
            for (u64 c = lane; c < n >> 2; c += 32) {
                const float4 o = ln_out4(xr[c], m, rs, bf16x4(w + 4 * c), bf16x4(b + 4 * c));
                const float y[4] = {__fmul_rn(o.x, s), __fmul_rn(o.y, s), __fmul_rn(o.z, s), __fmul_rn(o.w, s)};
                cast_store<F>(dst, r * n + 4 * c, 4, true, y);
            }
            continue;
        }
        for (u64 i = lane; i < n; i += 32)
            dst[r * n + i] =
                (u8)encode<F>(__fmul_rn(ln_out(x[r * n + i], m, rs, bf16_to_f32(w[i]), bf16_to_f32(b[i])), s));
    }
}

// gelu4 is gelu of four values.
__device__ __forceinline__ float4 gelu4(float4 v) { return make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w)); }

// gelu_cast writes the codes of gelu(x) for the n bfloat16 x, scaled by
// tensor_scale.
template <Fp8 F>
__device__ __forceinline__ void gelu_cast(u8 *dst, float *si, const u32 *amax, const u16 *x, u64 n, float fmax,
                                          float mfac, u32 pow2) {
    const float s = tensor_scale(amax, si, fmax, mfac, pow2);
    const u64 n8 = aligned(dst, 8) && aligned(x, 16) ? n / 8 : 0;
    for (u64 i = thread_index(); i < n8; i += grid_stride()) {
        float4 lo, hi;
        bf16x8(x + 8 * i, lo, hi);
        lo = gelu4(lo), hi = gelu4(hi);
        const u32 a = encode4<F>(make_float4(__fmul_rn(lo.x, s), __fmul_rn(lo.y, s), __fmul_rn(lo.z, s), __fmul_rn(lo.w, s)));
        const u32 b = encode4<F>(make_float4(__fmul_rn(hi.x, s), __fmul_rn(hi.y, s), __fmul_rn(hi.z, s), __fmul_rn(hi.w, s)));
        reinterpret_cast<uint2 *>(dst)[i] = make_uint2(a, b);
    }
    for (u64 i = 8 * n8 + thread_index(); i < n; i += grid_stride())
        dst[i] = (u8)encode<F>(__fmul_rn(gelu(bf16_to_f32(x[i])), s));
}

// gelu_delayed writes the codes of gelu(x) for the n bfloat16 x with the
// scale at scale (delayed_scale) and folds their amax into *amax: one
// pass, gpt_gelu_amax and gelu_cast together.
template <Fp8 F>
__device__ __forceinline__ void gelu_delayed(u8 *dst, float *si, const float *scale, u32 *amax, const u16 *x, u64 n) {
    const float s = delayed_scale(scale, si);
    u32 k = 0;
    const u64 n8 = aligned(dst, 8) && aligned(x, 16) ? n / 8 : 0;
    for (u64 i = thread_index(); i < n8; i += grid_stride()) {
        float4 lo, hi;
        bf16x8(x + 8 * i, lo, hi);
        lo = gelu4(lo), hi = gelu4(hi);
        k = max(k, max(amax4(lo), amax4(hi)));
        reinterpret_cast<uint2 *>(dst)[i] = make_uint2(encode4<F>(scale4(lo, s)), encode4<F>(scale4(hi, s)));
    }
    for (u64 i = 8 * n8 + thread_index(); i < n; i += grid_stride()) {
        const float g = gelu(bf16_to_f32(x[i]));
        k = max(k, amax_bits(g));
        dst[i] = (u8)encode<F>(__fmul_rn(g, s));
    }
    block_max_atomic(amax, k);
}

// bias_gelu_pass writes y = bf16(x + b) as gpt_bias_add_bf16 writes it
// (the kept fc), folds the amax of gelu(y) into *amax and, when CAST
// (delayed scaling), writes the codes of gelu(y) cast with the scale s in
// the same pass: gpt_bias_gelu_amax's pass, and gpt_bias_gelu_delayed's.
template <bool CAST, Fp8 F>
__device__ __forceinline__ void bias_gelu_pass(u8 *dst, float s, u32 *amax, u16 *y, const float *x, const u16 *b,
                                               u64 rows, u64 n) {
    u32 k = 0;
    if ((n & 3) == 0 && (!CAST || aligned(dst, 4)) && aligned(y, 8) && aligned(x, 16) && aligned(b, 8) &&
        rows * n < (1ull << 32)) {
        const u32 n4 = (u32)(n >> 2);
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        uint2 *y4 = reinterpret_cast<uint2 *>(y);
        for (u64 e = thread_index(); e < rows * n4; e += grid_stride()) {
            const uint2 h = bias_bf16x4(x4[e], bf16x4(b + 4 * ((u32)e % n4)));
            y4[e] = h;
            const float4 g = gelu4(widen4(h));
            k = max(k, amax4(g));
            if (CAST) reinterpret_cast<u32 *>(dst)[e] = encode4<F>(scale4(g, s));
        }
    } else {
        for (u64 e = thread_index(); e < rows * n; e += grid_stride()) {
            const u32 h = bf16_rn(x[e] + bf16_to_f32(b[e % n]));
            y[e] = (u16)h;
            const float g = gelu(bf16_to_f32(h));
            k = max(k, amax_bits(g));
            if (CAST) dst[e] = (u8)encode<F>(__fmul_rn(g, s));
        }
    }
    block_max_atomic(amax, k);
}

// BiasGELU is the source of gpt_bias_gelu_rows128: y = bf16(x + b) as
// gpt_bias_add_bf16 writes it (kept), and gelu(y) handed to the cast.
struct BiasGELU {
    u16 *y;
    const float *x;
    const u16 *b;
    __device__ __forceinline__ bool aligned_for(u8 *dst, u64 cols) const {
        return (cols & 3) == 0 && aligned(dst, 4) && aligned(y, 8) && aligned(x, 16) && aligned(b, 8);
    }
    // operator() writes gelu of elements e..e+cnt (columns c..) to g: one
    // vector of four when vec.
    __device__ __forceinline__ void operator()(u64 e, u64 c, int cnt, bool vec, float g[4]) const {
        if (vec) {
            const uint2 h = bias_bf16x4(*reinterpret_cast<const float4 *>(x + e), bf16x4(b + c));
            *reinterpret_cast<uint2 *>(y + e) = h;
            const float4 v = gelu4(widen4(h));
            g[0] = v.x, g[1] = v.y, g[2] = v.z, g[3] = v.w;
            return;
        }
        for (int j = 0; j < cnt; j++) {
            const u32 h = bf16_rn(x[e + j] + bf16_to_f32(b[c + j]));
            y[e + j] = (u16)h;
            g[j] = gelu(bf16_to_f32(h));
        }
    }
};

// GELUOf is the source of gpt_gelu_rows128: gelu of the bfloat16 y (a
// product with its bias, written by the GEMM's epilogue).
struct GELUOf {
    const u16 *y;
    __device__ __forceinline__ bool aligned_for(u8 *dst, u64 cols) const {
        return (cols & 3) == 0 && aligned(dst, 4) && aligned(y, 8);
    }
    __device__ __forceinline__ void operator()(u64 e, u64, int cnt, bool vec, float g[4]) const {
        if (vec) {
            const float4 v = gelu4(bf16x4(y + e));
            g[0] = v.x, g[1] = v.y, g[2] = v.z, g[3] = v.w;
            return;
        }
        for (int j = 0; j < cnt; j++) g[j] = gelu(bf16_to_f32(y[e + j]));
    }
};

// gelu_rows128: gelu of what src hands over (BiasGELU, GELUOf), cast in
// 1x128 blocks along the rows of cols, one warp per block (lane l:
// elements 4l..4l+3), as quant_rows128.
template <Fp8 F, class Src>
__device__ __forceinline__ void gelu_rows128(u8 *dst, float *si, const Src &src, u64 rows, u64 cols, float fmax,
                                             float mfac, u32 pow2) {
    const u64 kb = (cols + 127) / 128;
    const u32 lane = threadIdx.x & 31;
    const bool vec = src.aligned_for(dst, cols);
    for (u64 blk = warp_index(); blk < rows * kb; blk += warp_stride()) {
        const u64 row = blk / kb, k = blk % kb, c = k * 128 + 4 * lane, e = row * cols + c;
        const int cnt = c < cols ? (int)min(cols - c, (u64)4) : 0;
        float g[4] = {0, 0, 0, 0};
        src(e, c, cnt, vec && cnt == 4, g);
        cast_block<F>(dst, e, cnt, vec, g, si + k * rows + row, fmax, mfac, pow2);
    }
}

} // namespace

// gpt_bias_gelu_amax: y[r, o] = bf16(x[r, o] + b[o]) as gpt_bias_add_bf16
// writes it (the kept fc), and *amax folds the amax of gelu(y) (the next
// linear layer's input, not written).
extern "C" __global__ void gpt_bias_gelu_amax(u16 *y, const float *x, const u16 *b, u32 *amax, u64 rows, u64 n) {
    bias_gelu_pass<false, E4M3>(nullptr, 0.0f, amax, y, x, b, rows, n);
}

// gpt_gelu_amax: *amax folds the amax of gelu(y) for the n bfloat16 y (the
// kept fc, written with its bias by the GEMM's epilogue); gpt_gelu_cast
// then writes the codes.
extern "C" __global__ void gpt_gelu_amax(const u16 *y, u32 *amax, u64 n) {
    u32 k = 0;
    const u64 n8 = aligned(y, 16) ? n / 8 : 0;
    for (u64 i = thread_index(); i < n8; i += grid_stride()) {
        float4 lo, hi;
        bf16x8(y + 8 * i, lo, hi);
        k = max(k, max(amax4(gelu4(lo)), amax4(gelu4(hi))));
    }
    for (u64 i = 8 * n8 + thread_index(); i < n; i += grid_stride()) k = max(k, amax_bits(gelu(bf16_to_f32(y[i]))));
    block_max_atomic(amax, k);
}

// gpt_act_scales: the scales of delayed scaling of the activations, for
// each i < n, after a forward pass that folded its amaxes into amax: row i
// of hist (a ring of l amax keys) takes amax[i] at position pos (the
// oldest key), amax[i] becomes 0 for the next pass, and scale[i] =
// fp8.ScaleFromAmax(the row's largest key) (scale_from_amax: fmax, mfac,
// pow2 as the recipe's). One warp per row: its lanes read the row
// together.
extern "C" __global__ void gpt_act_scales(float *scale, u32 *hist, u32 *amax, u64 n, u32 l, u32 pos, float fmax,
                                          float mfac, u32 pow2) {
    const u32 lane = threadIdx.x & 31;
    for (u64 i = warp_index(); i < n; i += warp_stride()) {
        u32 *row = hist + i * l;
        const u32 a = amax[i] & 0x7fffffffu;
        u32 m = a;
        for (u32 j = lane; j < l; j += 32)
            if (j != pos) m = max(m, row[j] & 0x7fffffffu);
        m = __reduce_max_sync(FULL, m);
        if (lane == 0) {
            row[pos] = a;
            amax[i] = 0;
            float s, inv;
            scale_from_amax(m, fmax, mfac, pow2 != 0, s, inv);
            scale[i] = s;
        }
    }
}

// gpt_ln_amax (any width) and gpt_ln_amax_v4, _v8, _v16 (rows held in
// registers, as gpt_layernorm_v*): the statistics of each row of x (made
// the residual stream first when xin is not null: x = (x + bias) + xin),
// and the amax of the LayerNorm's output folded into *amax. The
// register kernels' gpt_ln_rows128_*_v* cast each 1x128 block of the
// output instead (scale_inv of block j of row r at si[j*rows + r]).
extern "C" __global__ void gpt_ln_amax(float *mean, float *rstd, u32 *amax, float *x, const float *xin,
                                       const u16 *bias, const u16 *w, const u16 *b, u64 rows, u64 n, float eps) {
    ln_amax_any(mean, rstd, amax, x, xin, bias, w, b, rows, n, eps);
}

#define GPT_FUSED_ROWS(V)                                                                                              \
    extern "C" __global__ void gpt_ln_amax_v##V(float *mean, float *rstd, u32 *amax, float *x, const float *xin,      \
                                                const u16 *bias, const u16 *w, const u16 *b, u64 rows, u64 n,          \
                                                float eps) {                                                           \
        AmaxSink f = {0};                                                                                              \
        ln_each_row<V>(mean, rstd, x, xin, bias, w, b, rows, n, eps, f);                                               \
        block_max_atomic(amax, f.k);                                                                                   \
    }                                                                                                                  \
    GPT_FUSED_ROWS128(V, e4m3, E4M3)                                                                                   \
    GPT_FUSED_ROWS128(V, e5m2, E5M2)                                                                                   \
    GPT_FUSED_DELAYED(V, e4m3, E4M3)                                                                                   \
    GPT_FUSED_DELAYED(V, e5m2, E5M2)

#define GPT_FUSED_ROWS128(V, fmt, F)                                                                                   \
    extern "C" __global__ void gpt_ln_rows128_##fmt##_v##V(                                                            \
        u8 *dst, float *si, float *mean, float *rstd, float *x, const float *xin, const u16 *bias, const u16 *w,       \
        const u16 *b, u64 rows, u64 n, float eps, float fmax, float mfac, u32 pow2) {                                  \
        Rows128Sink<F> f = {dst, si, rows, n, fmax, mfac, pow2};                                                       \
        ln_each_row<V>(mean, rstd, x, xin, bias, w, b, rows, n, eps, f);                                               \
    }

#define GPT_FUSED_DELAYED(V, fmt, F)                                                                                   \
    extern "C" __global__ void gpt_ln_delayed_##fmt##_v##V(                                                            \
        u8 *dst, float *si, const float *scale, u32 *amax, float *mean, float *rstd, float *x, const float *xin,       \
        const u16 *bias, const u16 *w, const u16 *b, u64 rows, u64 n, float eps) {                                    \
        DelayedSink<F> f = {dst, n, delayed_scale(scale, si), aligned(dst, 4), 0};                                     \
        ln_each_row<V>(mean, rstd, x, xin, bias, w, b, rows, n, eps, f);                                               \
        block_max_atomic(amax, f.k);                                                                                   \
    }

GPT_FUSED_ROWS(4)
GPT_FUSED_ROWS(8)
GPT_FUSED_ROWS(16)

// The kernels of each format: gpt_ln_rows128_e4m3 (any width), gpt_ln_cast_e4m3,
// gpt_gelu_cast_e4m3, gpt_bias_gelu_rows128_e4m3, gpt_gelu_rows128_e4m3 (the
// bfloat16 fc read as it is), gpt_ln_delayed_e4m3 (any width),
// gpt_gelu_delayed_e4m3, gpt_bias_gelu_delayed_e4m3, and those of E5M2.
#define GPT_FUSED_FORMAT(fmt, F)                                                                                       \
    extern "C" __global__ void gpt_ln_rows128_##fmt(u8 *dst, float *si, float *mean, float *rstd, float *x,           \
                                                    const float *xin, const u16 *bias, const u16 *w, const u16 *b,     \
                                                    u64 rows, u64 n, float eps, float fmax, float mfac, u32 pow2) {    \
        ln_rows128_any<F>(dst, si, mean, rstd, x, xin, bias, w, b, rows, n, eps, fmax, mfac, pow2);                    \
    }                                                                                                                  \
    extern "C" __global__ void gpt_ln_cast_##fmt(u8 *dst, float *si, const u32 *amax, const float *x,                 \
                                                 const float *mean, const float *rstd, const u16 *w, const u16 *b,     \
                                                 u64 rows, u64 n, float fmax, float mfac, u32 pow2) {                  \
        ln_cast<F>(dst, si, amax, x, mean, rstd, w, b, rows, n, fmax, mfac, pow2);                                     \
    }                                                                                                                  \
    extern "C" __global__ void gpt_gelu_cast_##fmt(u8 *dst, float *si, const u32 *amax, const u16 *x, u64 n,          \
                                                   float fmax, float mfac, u32 pow2) {                                 \
        gelu_cast<F>(dst, si, amax, x, n, fmax, mfac, pow2);                                                           \
    }                                                                                                                  \
    extern "C" __global__ void gpt_bias_gelu_rows128_##fmt(u8 *dst, float *si, u16 *y, const float *x, const u16 *b,  \
                                                           u64 rows, u64 cols, float fmax, float mfac, u32 pow2) {     \
        gelu_rows128<F>(dst, si, BiasGELU{y, x, b}, rows, cols, fmax, mfac, pow2);                                     \
    }                                                                                                                  \
    extern "C" __global__ void gpt_gelu_rows128_##fmt(u8 *dst, float *si, const u16 *y, u64 rows, u64 cols,           \
                                                      float fmax, float mfac, u32 pow2) {                              \
        gelu_rows128<F>(dst, si, GELUOf{y}, rows, cols, fmax, mfac, pow2);                                             \
    }                                                                                                                  \
    extern "C" __global__ void gpt_ln_delayed_##fmt(u8 *dst, float *si, const float *scale, u32 *amax, float *mean,   \
                                                    float *rstd, float *x, const float *xin, const u16 *bias,          \
                                                    const u16 *w, const u16 *b, u64 rows, u64 n, float eps) {          \
        ln_delayed_any<F>(dst, si, scale, amax, mean, rstd, x, xin, bias, w, b, rows, n, eps);                         \
    }                                                                                                                  \
    extern "C" __global__ void gpt_gelu_delayed_##fmt(u8 *dst, float *si, const float *scale, u32 *amax, const u16 *x, \
                                                      u64 n) {                                                         \
        gelu_delayed<F>(dst, si, scale, amax, x, n);                                                                   \
    }                                                                                                                  \
    extern "C" __global__ void gpt_bias_gelu_delayed_##fmt(u8 *dst, float *si, const float *scale, u32 *amax, u16 *y, \
                                                           const float *x, const u16 *b, u64 rows, u64 n) {            \
        bias_gelu_pass<true, F>(dst, delayed_scale(scale, si), amax, y, x, b, rows, n);                                \
    }

GPT_FUSED_FORMAT(e4m3, E4M3)
GPT_FUSED_FORMAT(e5m2, E5M2)
