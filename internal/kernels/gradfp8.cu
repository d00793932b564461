// gradfp8.cu: the codec of FP8 gradient reduce-scatters (package
// collective/fp8grad, whose Quantize and DequantSum are the reference).
//
// A wire piece of n elements in blocks of `block`: nb = ceil(n/block)
// float32 scale_invs, then n FP8 codes, then zero bytes up to a multiple
// of 4 (piece_bytes = 4*nb + roundup(n, 4)).
//
// gradq: one warp per block of a piece. x = src (+ residual), amax over
// the finite x of the block, power-of-two scale (scale_from_amax, margin
// 0), code = encode(x * scale) for finite x, the NaN code 0x7f for NaN and
// +-Inf. With a residual, residual = x - decode(code) * scale_inv (0 for a
// non-finite x).
//
// gradsum: one thread per element: the pieces decoded and added in
// float32 in piece order, divided by div unless div is 1, every NaN
// written as 0x7fc00000 (bfloat16: 0x7fff). No fused operations.
#include "segments.cuh"

using namespace distopt;

template <Fp8 F, typename T>
__device__ void gradq_kernel(u8 *dst, const T *src, float *res, u64 n, u64 pieces, u64 block, u64 piece_bytes,
                             float fmax) {
    const u64 nb = (n + block - 1) / block, total = pieces * nb;
    const u32 lane = threadIdx.x & 31;
    const u64 warp = thread_index() >> 5, warps = grid_stride() >> 5;
    for (u64 b = warp; b < total; b += warps) {
        const u64 p = b / nb, k = b % nb;
        const u64 lo = p * n + k * block, len = min(block, n - k * block);
        u8 *piece = dst + p * piece_bytes;
        u8 *codes = piece + 4 * nb + k * block;
        u32 m = 0;
        for (u64 j = lane; j < len; j += 32) {
            float x = ld1(src, lo + j);
            if (res) x = __fadd_rn(x, res[lo + j]);
            if (amax_bits(x) < 0x7f800000u) m = max(m, amax_bits(x));
        }
        m = __reduce_max_sync(FULL, m);
        float s, inv;
        scale_from_amax(m, fmax, 1.0f, true, s, inv);
        for (u64 j = lane; j < len; j += 32) {
            float x = ld1(src, lo + j);
            if (res) x = __fadd_rn(x, res[lo + j]);
            const bool finite = amax_bits(x) < 0x7f800000u;
            const u32 c = finite ? encode<F>(__fmul_rn(x, s)) : fp8_nan_code;
            codes[j] = (u8)c;
            if (res) res[lo + j] = finite ? __fsub_rn(x, __fmul_rn(decode<F>(c), inv)) : 0.0f;
        }
        if (lane == 0) reinterpret_cast<float *>(piece)[k] = inv;
        if (k == nb - 1)
            for (u64 j = n + lane; j < (n + 3) / 4 * 4; j += 32) piece[4 * nb + j] = 0;
    }
}

template <Fp8 F, typename T>
__device__ void gradsum_kernel(T *dst, const u8 *src, u64 n, u64 pieces, u64 block, u64 piece_bytes, float div) {
    const u64 nb = (n + block - 1) / block;
    for (u64 i = thread_index(); i < n; i += grid_stride()) {
        const u64 k = i / block;
        float acc = 0.0f;
        for (u64 s = 0; s < pieces; s++) {
            const u8 *piece = src + s * piece_bytes;
            const float v = __fmul_rn(decode<F>(piece[4 * nb + i]), reinterpret_cast<const float *>(piece)[k]);
            acc = s == 0 ? v : __fadd_rn(acc, v);
        }
        if (div != 1.0f) acc = __fdiv_rn(acc, div);
        if (acc != acc) acc = __uint_as_float(f32_nan_bits);
        st1(dst, i, acc);
    }
}

extern "C" {

#define GRAD_FP8(fmt, F, elem, T)                                                                               \
    __global__ void gradq_##fmt##_##elem(u8 *dst, const T *src, float *res, u64 n, u64 pieces, u64 block,       \
                                         u64 piece_bytes, float fmax) {                                         \
        gradq_kernel<F>(dst, src, res, n, pieces, block, piece_bytes, fmax);                                    \
    }                                                                                                           \
    __global__ void gradsum_##fmt##_##elem(T *dst, const u8 *src, u64 n, u64 pieces, u64 block, u64 piece_bytes, \
                                           float div) {                                                         \
        gradsum_kernel<F>(dst, src, n, pieces, block, piece_bytes, div);                                        \
    }

GRAD_FP8(e4m3, E4M3, f32, float)
GRAD_FP8(e4m3, E4M3, bf16, u16)
GRAD_FP8(e5m2, E5M2, f32, float)
GRAD_FP8(e5m2, E5M2, bf16, u16)

} // extern "C"
