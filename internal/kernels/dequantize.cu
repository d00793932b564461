// dequantize.cu: the fallback of the FP8 GEMMs (package gemm) for recipes
// the H200's tensor cores cannot read (MXFP8, 1x128 weights): one FP8
// matrix dequantized into a bfloat16 scratch buffer.
#include "bf16.cuh"
#include "fp8.cuh"

using namespace distopt;

// Scale kinds of dequant_bf16 (how element i finds its scale_inv).
enum ScaleKind { SK_TENSOR = 0, SK_BLOCKS = 1, SK_E8M0 = 2, SK_TILES = 3, SK_ROWS128 = 4 };

// e8m0_value is fp8.E8M0Value: 2^(e-127), NaN for 0xff.
__device__ __forceinline__ float e8m0_value(u32 e) {
    if (e == 0xffu) return __uint_as_float(f32_nan_bits);
    if (e == 0) return __uint_as_float(0x00400000u); // 2^-127, a float32 subnormal
    return __uint_as_float(e << 23);
}

// dequant_kernel: dst[i] = bf16_rn(decode(src[i]) * scale_inv(i)) for i <
// n, the product a float32 multiply (fp8.Tensor.Dequantize, then
// fp8.BF16FromFloat32). scale_inv(i) by kind: scales[0]; scales[i/block]
// (float32); E8M0 byte i/block; tile of the row-major matrix with cols
// columns, fp8.TileIndex(i, cols, 128); 1x128 row blocks in cuBLASLt's
// layout, scales[(i % cols)/128 * block + i / cols] (block = the pitch).
template <Fp8 F>
__device__ void dequant_kernel(u16 *dst, const u8 *src, u64 n, const void *scales, u32 kind, u64 block, u64 cols) {
    const u64 per_row = (cols + 127) / 128;
    for (u64 i = thread_index(); i < n; i += grid_stride()) {
        float inv;
        switch (kind) {
        case SK_TENSOR: inv = ((const float *)scales)[0]; break;
        case SK_BLOCKS: inv = ((const float *)scales)[i / block]; break;
        case SK_E8M0: inv = e8m0_value(((const u8 *)scales)[i / block]); break;
        case SK_ROWS128: inv = ((const float *)scales)[i % cols / 128 * block + i / cols]; break;
        default: inv = ((const float *)scales)[i / cols / 128 * per_row + i % cols / 128]; break;
        }
        dst[i] = (u16)bf16_rn(__fmul_rn(decode<F>(src[i]), inv));
    }
}

extern "C" {

__global__ void dequant_bf16_e4m3(u16 *dst, const u8 *src, u64 n, const void *scales, u32 kind, u64 block,
                                  u64 cols) {
    dequant_kernel<E4M3>(dst, src, n, scales, kind, block, cols);
}
__global__ void dequant_bf16_e5m2(u16 *dst, const u8 *src, u64 n, const void *scales, u32 kind, u64 block,
                                  u64 cols) {
    dequant_kernel<E5M2>(dst, src, n, scales, kind, block, cols);
}

} // extern "C"
