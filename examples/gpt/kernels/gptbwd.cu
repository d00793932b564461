// gptbwd.cu: examples/gpt's backward element-wise kernels that feed the
// FP8 linear layers' output gradients. issue 37's profile of the 1.3B
// micro-batch (docs/BENCHMARKS.md, "One micro-batch, activations and the
// other kernels") put "a separate amax pass over each float32 activation
// 6%" among the element-wise kernels; here the producers of each linear
// layer's output gradient fold its amax as they write it, and package
// gemm takes it (gemm.Linear.BackwardAmax) instead of reading the
// gradient once more:
//
//   - gpt_layernorm_grad_x_amax (any width) and _v4, _v8, _v16 (the row in
//     registers): gpt_layernorm_grad_x's values, folding the amax of the
//     final dx (the residual stream's gradient, the output gradient of
//     mlp.proj and attn.proj); the _bf16 ones read a bfloat16 dy;
//   - gpt_gelu_grad_amax_f32: gpt_gelu_grad_bf16's values (bfloat16 fc),
//     folding their amax (mlp.fc's output gradient); _bf16 reads dy and
//     writes dx in bfloat16, the amax that of the rounded values;
//   - gpt_column_sum_partial_bf16 and gpt_layernorm_grad_wb_partial_bf16:
//     gptcols.cu's first passes over a bfloat16 dy.
//
// The values are computed by the very device functions of the separate
// kernels (gptbwd.cuh, gpt.cuh), so a float32 dy gives their bits. amax
// may be null (1x128 blocks have no tensor amax): nothing is folded.
#include "gptbwd.cuh"

using namespace distopt;

namespace {

// put1 stores v at p[i] (rounded to nearest even for bfloat16) and returns
// the amax key of the value stored.
__device__ __forceinline__ u32 put1(float *p, u64 i, float v) {
    p[i] = v;
    return amax_bits(v);
}
__device__ __forceinline__ u32 put1(u16 *p, u64 i, float v) {
    const u32 h = bf16_rn(v);
    p[i] = (u16)h;
    return amax_bits(bf16_to_f32(h));
}

// put4 stores v at elements 4c..4c+3 of p (16-byte aligned for float32,
// 8-byte for bfloat16) and returns the largest amax key of the values
// stored.
__device__ __forceinline__ u32 put4(float *p, u64 c, float4 v) {
    reinterpret_cast<float4 *>(p)[c] = v;
    return amax4(v);
}
__device__ __forceinline__ u32 put4(u16 *p, u64 c, float4 v) {
    const uint2 h = make_uint2(bf16_rn(v.x) | bf16_rn(v.y) << 16, bf16_rn(v.z) | bf16_rn(v.w) << 16);
    reinterpret_cast<uint2 *>(p)[c] = h;
    return amax4(widen4(h));
}

// gelu_grad_amax sets dx[i] = gelu_grad(dy[i], x[i]) for i < n, x the
// bfloat16 fc, and folds the amax of the values stored into *amax unless
// it is null. Four elements a thread when every pointer is aligned for it
// and n is a multiple of 4.
template <class D, class T> __device__ __forceinline__ void gelu_grad_amax(D *dx, const T *dy, const u16 *x, u64 n, u32 *amax) {
    u32 k = 0;
    const bool vec = (n & 3) == 0 && aligned(dx, 4 * sizeof(D)) && aligned(dy, 4 * sizeof(T)) && aligned(x, 8);
    const u64 n4 = vec ? n >> 2 : 0;
    for (u64 c = thread_index(); c < n4; c += grid_stride()) {
        const float4 d = quad_at(dy, c), v = bf16x4(x + 4 * c);
        k = max(k, put4(dx, c, make_float4(gelu_grad(d.x, v.x), gelu_grad(d.y, v.y), gelu_grad(d.z, v.z),
                                           gelu_grad(d.w, v.w))));
    }
    for (u64 i = 4 * n4 + thread_index(); i < n; i += grid_stride())
        k = max(k, put1(dx, i, gelu_grad(elem_at(dy, i), bf16_to_f32(x[i]))));
    fold_amax<true>(amax, k);
}

} // namespace

// gpt_layernorm_grad_x_amax and _bf16: gpt_layernorm_grad_x of a float32
// or bfloat16 dy, folding the amax of dx.
extern "C" __global__ void gpt_layernorm_grad_x_amax(float *dx, const float *dy, const float *x, const float *mean,
                                                     const float *rstd, const u16 *w, u64 rows, u64 n, u32 *amax) {
    ln_grad_x_any<float, true>(dx, dy, x, mean, rstd, w, rows, n, amax);
}
extern "C" __global__ void gpt_layernorm_grad_x_bf16_amax(float *dx, const u16 *dy, const float *x, const float *mean,
                                                          const float *rstd, const u16 *w, u64 rows, u64 n,
                                                          u32 *amax) {
    ln_grad_x_any<u16, true>(dx, dy, x, mean, rstd, w, rows, n, amax);
}

// The register-resident ones, for V = 4, 8 and 16 (gptrows.cu's layout).
#define GPT_BWD_ROW_KERNELS(V)                                                                                         \
    extern "C" __global__ void gpt_layernorm_grad_x_amax_v##V(float *dx, const float *dy, const float *x,             \
                                                              const float *mean, const float *rstd, const u16 *w,     \
                                                              u64 rows, u64 n, u32 *amax) {                            \
        ln_grad_x_rows<V, float, true>(dx, dy, x, mean, rstd, w, rows, n, amax);                                       \
    }                                                                                                                  \
    extern "C" __global__ void gpt_layernorm_grad_x_bf16_amax_v##V(float *dx, const u16 *dy, const float *x,          \
                                                                   const float *mean, const float *rstd,              \
                                                                   const u16 *w, u64 rows, u64 n, u32 *amax) {         \
        ln_grad_x_rows<V, u16, true>(dx, dy, x, mean, rstd, w, rows, n, amax);                                         \
    }

GPT_BWD_ROW_KERNELS(4)
GPT_BWD_ROW_KERNELS(8)
GPT_BWD_ROW_KERNELS(16)

// gpt_gelu_grad_amax_f32: gpt_gelu_grad_bf16 (dx, dy float32, x bfloat16)
// folding the amax of dx.
extern "C" __global__ void gpt_gelu_grad_amax_f32(float *dx, const float *dy, const u16 *x, u64 n, u32 *amax) {
    gelu_grad_amax(dx, dy, x, n, amax);
}

// gpt_gelu_grad_amax_bf16: dx = bf16(dy*GELU'(x)), dx, dy and x bfloat16,
// folding the amax of the rounded dx.
extern "C" __global__ void gpt_gelu_grad_amax_bf16(u16 *dx, const u16 *dy, const u16 *x, u64 n, u32 *amax) {
    gelu_grad_amax(dx, dy, x, n, amax);
}

// gpt_column_sum_partial_bf16: gpt_column_sum_partial of a bfloat16 dy.
extern "C" __global__ void __launch_bounds__(32 * COL_GROUPS)
    gpt_column_sum_partial_bf16(float *part, const u16 *dy, u64 rows, u64 n) {
    __shared__ float s[COL_GROUPS][32];
    column_sum_partial(part, dy, rows, n, s);
}

// gpt_layernorm_grad_wb_partial_bf16: gpt_layernorm_grad_wb_partial of a
// bfloat16 dy.
extern "C" __global__ void __launch_bounds__(32 * COL_GROUPS)
    gpt_layernorm_grad_wb_partial_bf16(float *part, const u16 *dy, const float *x, const float *mean,
                                       const float *rstd, u64 rows, u64 n) {
    __shared__ float s[COL_GROUPS][32];
    ln_grad_wb_partial(part, dy, x, mean, rstd, rows, n, s);
}
