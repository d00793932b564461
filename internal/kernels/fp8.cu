// fp8.cu: elementwise FP8 kernels (encode, decode, scaled cast with amax).
//
// Every kernel is a grid-stride loop over n elements that takes four
// elements per step (one 16-byte float access) when its pointers allow it,
// and one at a time otherwise.
#include "fp8.cuh"

using namespace distopt;

// encode_kernel: dst[i] = encode<F>(src[i]) for i < n.
template <Fp8 F> __device__ void encode_kernel(u8 *dst, const float *src, u64 n) {
    const u64 t = thread_index(), stride = grid_stride();
    const u64 n4 = aligned(src, 16) && aligned(dst, 4) ? n / 4 : 0;
    for (u64 i = t; i < n4; i += stride)
        reinterpret_cast<u32 *>(dst)[i] = encode4<F>(reinterpret_cast<const float4 *>(src)[i]);
    for (u64 i = 4 * n4 + t; i < n; i += stride) dst[i] = (u8)encode<F>(src[i]);
}

// decode_kernel: dst[i] = decode<F>(src[i]) for i < n.
template <Fp8 F> __device__ void decode_kernel(float *dst, const u8 *src, u64 n) {
    const u64 t = thread_index(), stride = grid_stride();
    const u64 n4 = aligned(src, 4) && aligned(dst, 16) ? n / 4 : 0;
    for (u64 i = t; i < n4; i += stride)
        reinterpret_cast<float4 *>(dst)[i] = decode4<F>(reinterpret_cast<const u32 *>(src)[i]);
    for (u64 i = 4 * n4 + t; i < n; i += stride) dst[i] = decode<F>(src[i]);
}

// cast_scaled_kernel: dst[i] = encode<F>(src[i] * scale) for i < n, the
// product rounded to float32 (no fused operation), and *amax = max(*amax,
// max over i of amax_bits(src[i])). All threads of each block must reach the
// final reduction.
template <Fp8 F> __device__ void cast_scaled_kernel(u8 *dst, const float *src, u64 n, float scale, u32 *amax) {
    const u64 t = thread_index(), stride = grid_stride();
    const u64 n4 = aligned(src, 16) && aligned(dst, 4) ? n / 4 : 0;
    u32 m = 0;
    for (u64 i = t; i < n4; i += stride) {
        const float4 x = reinterpret_cast<const float4 *>(src)[i];
        m = max(m, max(max(amax_bits(x.x), amax_bits(x.y)), max(amax_bits(x.z), amax_bits(x.w))));
        const float4 y = make_float4(__fmul_rn(x.x, scale), __fmul_rn(x.y, scale), __fmul_rn(x.z, scale),
                                     __fmul_rn(x.w, scale));
        reinterpret_cast<u32 *>(dst)[i] = encode4<F>(y);
    }
    for (u64 i = 4 * n4 + t; i < n; i += stride) {
        const float x = src[i];
        m = max(m, amax_bits(x));
        dst[i] = (u8)encode<F>(__fmul_rn(x, scale));
    }
    block_max_atomic(amax, m);
}

extern "C" {

__global__ void fp8_encode_e4m3(u8 *dst, const float *src, u64 n) { encode_kernel<E4M3>(dst, src, n); }
__global__ void fp8_encode_e5m2(u8 *dst, const float *src, u64 n) { encode_kernel<E5M2>(dst, src, n); }

__global__ void fp8_decode_e4m3(float *dst, const u8 *src, u64 n) { decode_kernel<E4M3>(dst, src, n); }
__global__ void fp8_decode_e5m2(float *dst, const u8 *src, u64 n) { decode_kernel<E5M2>(dst, src, n); }

__global__ void fp8_cast_scaled_e4m3(u8 *dst, const float *src, u64 n, float scale, u32 *amax) {
    cast_scaled_kernel<E4M3>(dst, src, n, scale, amax);
}
__global__ void fp8_cast_scaled_e5m2(u8 *dst, const float *src, u64 n, float scale, u32 *amax) {
    cast_scaled_kernel<E5M2>(dst, src, n, scale, amax);
}

} // extern "C"
