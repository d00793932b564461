// transform.cu: the element-wise kernels with which collective/nccl makes
// NCCL's reductions agree with collective.Reduce. Every kernel is a
// grid-stride loop over n elements with 64-bit indices; no CUDA header is
// needed. Compiled to transform.ptx by gen.sh (nvcc 11.8, compute_80,
// --fmad=false).
//
// Order keys (for Max): key(x) of a floating point x is an unsigned integer
// of the same width (32 bits for bfloat16, widened) whose unsigned order is
// collective.Reduce's order for Max: every NaN maps to the all-ones key,
// above +Inf; -0 is below +0; otherwise the order of the values. For the
// bits b of a non-NaN x with sign bit s: key = s ? ~b : b | s-bit. unkey
// inverts it, giving the canonical quiet NaN for the all-ones key.
//
// Exact average (collective.Reduce's Avg): sums are taken in float32
// (float64) by NCCL, then div_* divide by n with IEEE division rounded to
// nearest even, and bfloat16 results are rounded from float32 to nearest
// even (overflow to +-Inf, NaN to 0x7fff, as fp8.BF16FromFloat32).

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

__device__ __forceinline__ u64 first() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 stride() { return (u64)gridDim.x * blockDim.x; }

__device__ __forceinline__ u32 key32(u32 b) {
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu;
    return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}
__device__ __forceinline__ u32 unkey32(u32 k) {
    if (k == 0xffffffffu) return 0x7fc00000u;
    return (k & 0x80000000u) ? k & 0x7fffffffu : ~k;
}
__device__ __forceinline__ u64 key64(u64 b) {
    if ((b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return ~0ull;
    return (b & 0x8000000000000000ull) ? ~b : b | 0x8000000000000000ull;
}
__device__ __forceinline__ u64 unkey64(u64 k) {
    if (k == ~0ull) return 0x7ff8000000000000ull;
    return (k & 0x8000000000000000ull) ? k & 0x7fffffffffffffffull : ~k;
}

// bf16_rn rounds the float32 bits b to bfloat16, nearest even.
__device__ __forceinline__ u16 bf16_rn(u32 b) {
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    return (u16)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

extern "C" __global__ void key_f32(u32 *dst, const u32 *src, u64 n) {
    for (u64 i = first(); i < n; i += stride()) dst[i] = key32(src[i]);
}
extern "C" __global__ void unkey_f32(u32 *dst, const u32 *src, u64 n) {
    for (u64 i = first(); i < n; i += stride()) dst[i] = unkey32(src[i]);
}
extern "C" __global__ void key_bf16(u32 *dst, const u16 *src, u64 n) {
    for (u64 i = first(); i < n; i += stride()) dst[i] = key32((u32)src[i] << 16);
}
extern "C" __global__ void unkey_bf16(u16 *dst, const u32 *src, u64 n) {
    for (u64 i = first(); i < n; i += stride()) {
        const u32 b = unkey32(src[i]);
        dst[i] = (b & 0x7fffffffu) > 0x7f800000u ? (u16)0x7fff : (u16)(b >> 16);
    }
}
extern "C" __global__ void key_f64(u64 *dst, const u64 *src, u64 n) {
    for (u64 i = first(); i < n; i += stride()) dst[i] = key64(src[i]);
}
extern "C" __global__ void unkey_f64(u64 *dst, const u64 *src, u64 n) {
    for (u64 i = first(); i < n; i += stride()) dst[i] = unkey64(src[i]);
}

// widen_bf16: dst[i] = src[i] as float32 (exact).
extern "C" __global__ void widen_bf16(u32 *dst, const u16 *src, u64 n) {
    for (u64 i = first(); i < n; i += stride()) dst[i] = (u32)src[i] << 16;
}
// div_f32, div_f64: x[i] = x[i] / d, IEEE division rounded to nearest even.
extern "C" __global__ void div_f32(float *x, u64 n, float d) {
    for (u64 i = first(); i < n; i += stride()) x[i] = __fdiv_rn(x[i], d);
}
extern "C" __global__ void div_f64(double *x, u64 n, double d) {
    for (u64 i = first(); i < n; i += stride()) x[i] = __ddiv_rn(x[i], d);
}
// div_bf16: dst[i] = bfloat16(src[i] / d), both roundings to nearest even.
extern "C" __global__ void div_bf16(u16 *dst, const float *src, u64 n, float d) {
    for (u64 i = first(); i < n; i += stride()) dst[i] = bf16_rn(__float_as_uint(__fdiv_rn(src[i], d)));
}
