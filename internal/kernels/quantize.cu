// quantize.cu: activation quantization for the FP8 GEMMs (package gemm).
//
// Per-tensor: quant_amax folds the amax of a tensor, quant_scale derives
// the scale with fp8.ScaleFromAmax's rule on the device, quant_cast casts
// with the scale read from device memory (current scaling: the three in
// order; delayed scaling: quant_cast alone with the history's scale).
// 1x128 blocks: quant_rows128 casts each run of 128 elements along a row
// (fp8.CastBlocks1D applied to each row), quant_cols128 each run of 128
// elements down a column and writes the transpose (fp8.CastBlocks1D
// applied to each column), for the K-major operands of the weight gradient.
// Block scale_inv values are written in cuBLASLt's VEC128_32F layout: the
// scale of block k of outer index o (a row of the FP8 output) at
// scale_inv[k*ld + o].
//
// Inputs are float32 or bfloat16 (widened exactly); the products x * scale
// are rounded to float32 (no fused operation) before the encode.
#include "segments.cuh"

using namespace distopt;

// amax16 returns the largest amax key of the elements in the 16 bytes q
// (four float32, or eight bfloat16, whose key is their widened float32's).
__device__ __forceinline__ u32 amax16(uint4 q, const float *) {
    return max(max(q.x & 0x7fffffffu, q.y & 0x7fffffffu), max(q.z & 0x7fffffffu, q.w & 0x7fffffffu));
}
__device__ __forceinline__ u32 amax16(uint4 q, const u16 *) {
    const u32 hi = max(max(q.x & 0x7fff0000u, q.y & 0x7fff0000u), max(q.z & 0x7fff0000u, q.w & 0x7fff0000u));
    const u32 lo = max(max(q.x & 0x7fffu, q.y & 0x7fffu), max(q.z & 0x7fffu, q.w & 0x7fffu));
    return max(hi, lo << 16);
}

// AMAX_LOADS 16-byte loads a thread are issued before their keys are
// compared: the pass is bound by how many bytes are in flight.
#define AMAX_LOADS 4

// quant_amax: *amax = max(*amax, max over i < n of amax_bits(src[i])).
template <typename T> __device__ void amax_kernel(const T *src, u64 n, u32 *amax) {
    u32 m = 0;
    const u64 e = 16 / sizeof(T), nv = aligned(src, 16) ? n / e : 0, st = grid_stride();
    const uint4 *v = reinterpret_cast<const uint4 *>(src);
    u64 i = thread_index();
    for (; i + (AMAX_LOADS - 1) * st < nv; i += AMAX_LOADS * st) {
        uint4 q[AMAX_LOADS];
#pragma unroll
        for (int k = 0; k < AMAX_LOADS; k++) q[k] = v[i + k * st];
#pragma unroll
        for (int k = 0; k < AMAX_LOADS; k++) m = max(m, amax16(q[k], src));
    }
    for (; i < nv; i += st) m = max(m, amax16(v[i], src));
    for (u64 j = e * nv + thread_index(); j < n; j += st) m = max(m, amax_bits(ld1(src, j)));
    block_max_atomic(amax, m);
}

// quant_cast: dst[i] = encode(src[i] * *scale); folds the amax of src into
// *amax when amax is not null.
template <Fp8 F, typename T> __device__ void cast_kernel(u8 *dst, const T *src, u64 n, const float *scale, u32 *amax) {
    const float s = *scale;
    u32 m = 0;
    const u64 n4 = aligned(dst, 4) && aligned(src, 4 * sizeof(T)) ? n / 4 : 0;
    for (u64 i = thread_index(); i < n4; i += grid_stride()) {
        float x[4];
        ld4(src, 4 * i, x);
        m = max(m, max(max(amax_bits(x[0]), amax_bits(x[1])), max(amax_bits(x[2]), amax_bits(x[3]))));
        reinterpret_cast<u32 *>(dst)[i] = encode4<F>(make_float4(__fmul_rn(x[0], s), __fmul_rn(x[1], s),
                                                                 __fmul_rn(x[2], s), __fmul_rn(x[3], s)));
    }
    for (u64 i = 4 * n4 + thread_index(); i < n; i += grid_stride()) {
        const float x = ld1(src, i);
        m = max(m, amax_bits(x));
        dst[i] = (u8)encode<F>(__fmul_rn(x, s));
    }
    if (amax) block_max_atomic(amax, m);
}

// rows128: one warp per block of 128 elements of a row (the last block of a
// row may be shorter); lane l takes elements 4l..4l+3 of the block.
template <Fp8 F, typename T>
__device__ void rows128_kernel(u8 *dst, float *scale_inv, u64 ld, const T *src, u64 rows, u64 cols, float fmax,
                               float mfac, u32 pow2, u32 *amax) {
    const u64 kb = (cols + 127) / 128, nblocks = rows * kb;
    const u32 lane = threadIdx.x & 31;
    const u64 warp = thread_index() >> 5, warps = grid_stride() >> 5;
    u32 gm = 0;
    for (u64 b = warp; b < nblocks; b += warps) {
        const u64 row = b / kb, k = b % kb;
        const u64 c = k * 128 + 4 * lane;
        float x[4];
        u32 m = 0;
        for (int j = 0; j < 4; j++) {
            x[j] = c + j < cols ? ld1(src, row * cols + c + j) : 0.0f;
            m = max(m, amax_bits(x[j]));
        }
        m = __reduce_max_sync(FULL, m);
        gm = max(gm, m);
        float s, inv;
        scale_from_amax(m, fmax, mfac, pow2 != 0, s, inv);
        for (int j = 0; j < 4; j++)
            if (c + j < cols) dst[row * cols + c + j] = (u8)encode<F>(__fmul_rn(x[j], s));
        if (lane == 0) scale_inv[k * ld + row] = inv;
    }
    if (amax) block_max_atomic(amax, gm);
}

// cols128: block (bx, by) takes src rows by*128.. and columns bx*32..; the
// 128 x 32 tile goes through shared memory, then warp w quantizes columns
// 4w..4w+3 of it, each one 1x128 block of the transposed output: dst[c*rows
// + r] for r in the block.
template <Fp8 F, typename T>
__device__ void cols128_kernel(u8 *dst, float *scale_inv, u64 ld, const T *src, u64 rows, u64 cols, float fmax,
                               float mfac, u32 pow2, u32 *amax) {
    __shared__ float tile[128][33];
    const u64 r0 = (u64)blockIdx.y * 128, c0 = (u64)blockIdx.x * 32;
    const u32 t = threadIdx.x, lane = t & 31, w = t >> 5;
    for (u32 i = t; i < 128 * 32; i += blockDim.x) {
        const u32 r = i / 32, c = i % 32;
        tile[r][c] = r0 + r < rows && c0 + c < cols ? ld1(src, (r0 + r) * cols + c0 + c) : 0.0f;
    }
    __syncthreads();
    u32 gm = 0;
    for (u32 cc = 4 * w; cc < 4 * w + 4; cc++) {
        const u64 c = c0 + cc;
        float x[4];
        u32 m = 0;
        for (int j = 0; j < 4; j++) {
            x[j] = tile[4 * lane + j][cc];
            m = max(m, amax_bits(x[j]));
        }
        m = __reduce_max_sync(FULL, m);
        gm = max(gm, m);
        if (c >= cols) continue;
        float s, inv;
        scale_from_amax(m, fmax, mfac, pow2 != 0, s, inv);
        for (int j = 0; j < 4; j++) {
            const u64 r = r0 + 4 * lane + j;
            if (r < rows) dst[c * rows + r] = (u8)encode<F>(__fmul_rn(x[j], s));
        }
        if (lane == 0) scale_inv[blockIdx.y * ld + c] = inv;
    }
    if (amax) block_max_atomic(amax, gm);
}

extern "C" {

__global__ void quant_amax_f32(const float *src, u64 n, u32 *amax) { amax_kernel(src, n, amax); }
__global__ void quant_amax_bf16(const u16 *src, u64 n, u32 *amax) { amax_kernel(src, n, amax); }

// quant_scale: *scale, *scale_inv = fp8.ScaleFromAmax(amax bits *amax,
// fmax, margin, pow2), mfac = float32(2^-margin). One thread.
__global__ void quant_scale(const u32 *amax, float *scale, float *scale_inv, float fmax, float mfac, u32 pow2) {
    if (thread_index() != 0) return;
    float s, inv;
    scale_from_amax(*amax & 0x7fffffffu, fmax, mfac, pow2 != 0, s, inv);
    *scale = s, *scale_inv = inv;
}

#define QUANT_FORMAT(fmt, F)                                                                                   \
    __global__ void quant_cast_##fmt##_f32(u8 *dst, const float *src, u64 n, const float *scale, u32 *amax) {  \
        cast_kernel<F>(dst, src, n, scale, amax);                                                              \
    }                                                                                                          \
    __global__ void quant_cast_##fmt##_bf16(u8 *dst, const u16 *src, u64 n, const float *scale, u32 *amax) {   \
        cast_kernel<F>(dst, src, n, scale, amax);                                                              \
    }                                                                                                          \
    __global__ void quant_rows128_##fmt##_f32(u8 *dst, float *si, u64 ld, const float *src, u64 rows, u64 cols, \
                                              float fmax, float mfac, u32 pow2, u32 *amax) {                   \
        rows128_kernel<F>(dst, si, ld, src, rows, cols, fmax, mfac, pow2, amax);                               \
    }                                                                                                          \
    __global__ void quant_rows128_##fmt##_bf16(u8 *dst, float *si, u64 ld, const u16 *src, u64 rows, u64 cols, \
                                               float fmax, float mfac, u32 pow2, u32 *amax) {                  \
        rows128_kernel<F>(dst, si, ld, src, rows, cols, fmax, mfac, pow2, amax);                               \
    }                                                                                                          \
    __global__ void quant_cols128_##fmt##_f32(u8 *dst, float *si, u64 ld, const float *src, u64 rows, u64 cols, \
                                              float fmax, float mfac, u32 pow2, u32 *amax) {                   \
        cols128_kernel<F>(dst, si, ld, src, rows, cols, fmax, mfac, pow2, amax);                               \
    }                                                                                                          \
    __global__ void quant_cols128_##fmt##_bf16(u8 *dst, float *si, u64 ld, const u16 *src, u64 rows, u64 cols, \
                                               float fmax, float mfac, u32 pow2, u32 *amax) {                  \
        cols128_kernel<F>(dst, si, ld, src, rows, cols, fmax, mfac, pow2, amax);                               \
    }

QUANT_FORMAT(e4m3, E4M3)
QUANT_FORMAT(e5m2, E5M2)

} // extern "C"
