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
//     gptcols.cu's first passes over a bfloat16 dy;
//   - gpt_dy_cast_{e4m3,e5m2}_{f32,bf16} (gpumodel's Options.FuseDY): a
//     linear layer's output gradient cast to FP8 in one pass that writes
//     the codes row-major (the input gradient's operand) and transposed
//     (the weight gradient's), and sums its columns (the bias gradient)
//     as gpt_column_sum_partial does, where package gemm would cast, then
//     transpose, and gptcols.cu sum, each reading dy again.
//
// The values are computed by the very device functions of the separate
// kernels (gptbwd.cuh, gpt.cuh), so a float32 dy gives their bits. amax
// may be null (1x128 blocks have no tensor amax): nothing is folded.
#include "gptbwd.cuh"
#include "fp8.cuh"

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

// grad4 is gelu_grad of four output gradients d at the values v.
__device__ __forceinline__ float4 grad4(float4 d, float4 v) {
    return make_float4(gelu_grad(d.x, v.x), gelu_grad(d.y, v.y), gelu_grad(d.z, v.z), gelu_grad(d.w, v.w));
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
        k = max(k, put4(dx, c, grad4(d, v)));
    }
    for (u64 i = 4 * n4 + thread_index(); i < n; i += grid_stride())
        k = max(k, put1(dx, i, gelu_grad(elem_at(dy, i), bf16_to_f32(x[i]))));
    fold_amax<true>(amax, k);
}

// gelu_grad_amax8 is gelu_grad_amax of bfloat16 dx and dy, eight elements
// a thread (16-byte loads and stores, see bf16x8) when every pointer is
// 16-byte aligned and n is a multiple of 8; otherwise gelu_grad_amax's
// four. The same values, stored and folded alike.
__device__ __forceinline__ void gelu_grad_amax8(u16 *dx, const u16 *dy, const u16 *x, u64 n, u32 *amax) {
    if ((n & 7) != 0 || !aligned(dx, 16) || !aligned(dy, 16) || !aligned(x, 16)) {
        gelu_grad_amax(dx, dy, x, n, amax);
        return;
    }
    u32 k = 0;
    for (u64 c = thread_index(); c < n >> 3; c += grid_stride()) {
        float4 d0, d1, v0, v1;
        bf16x8(dy + 8 * c, d0, d1);
        bf16x8(x + 8 * c, v0, v1);
        const float4 g0 = grad4(d0, v0), g1 = grad4(d1, v1);
        const uint4 h = make_uint4(bf16_rn(g0.x) | bf16_rn(g0.y) << 16, bf16_rn(g0.z) | bf16_rn(g0.w) << 16,
                                   bf16_rn(g1.x) | bf16_rn(g1.y) << 16, bf16_rn(g1.z) | bf16_rn(g1.w) << 16);
        reinterpret_cast<uint4 *>(dx)[c] = h;
        k = max(k, max(amax4(widen4(make_uint2(h.x, h.y))), amax4(widen4(make_uint2(h.z, h.w)))));
    }
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
    gelu_grad_amax8(dx, dy, x, n, amax);
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

// DY_COLS columns of dy per block of gpt_dy_cast (four per lane), over
// COL_CHUNK rows; DY_STRIDE bytes per column of its transposed tile (a
// word more than the rows: with the XOR below it spreads a warp's byte
// stores of one row over the 32 banks).
#define DY_COLS 128
#define DY_STRIDE (COL_CHUNK + 4)
// DY_BATCH rows of dy loaded per warp before the first is stored.
#define DY_BATCH 8

// A named namespace, not an anonymous one: nvcc names the shared arrays of
// functions in an anonymous namespace after a hash of the source's path,
// which would make the generated PTX depend on where it was generated.
namespace gptdy {

// dy_quad loads dy[r, c..c+cnt) (zeros past cnt), as one vector when vec.
__device__ __forceinline__ void dy_quad(float v[4], const float *dy, u64 i, int cnt, bool vec) {
    if (vec) {
        const float4 q = *reinterpret_cast<const float4 *>(dy + i);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = j < cnt ? dy[i + j] : 0.0f;
}
__device__ __forceinline__ void dy_quad(float v[4], const u16 *dy, u64 i, int cnt, bool vec) {
    if (vec) {
        const float4 q = bf16x4(dy + i);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = j < cnt ? bf16_to_f32(dy[i + j]) : 0.0f;
}

// Raw4<T>::type holds four elements of dy as loaded (a float4, or four
// bfloat16 in two words); raw4 loads them (16-byte aligned for float32,
// 8-byte for bfloat16) and widen makes them floats.
template <class T> struct Raw4;
template <> struct Raw4<float> { typedef float4 type; };
template <> struct Raw4<u16> { typedef uint2 type; };
__device__ __forceinline__ float4 raw4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ uint2 raw4(const u16 *p) { return *reinterpret_cast<const uint2 *>(p); }
__device__ __forceinline__ float4 widen(float4 v) { return v; }
__device__ __forceinline__ float4 widen(uint2 v) { return widen4(v); }

// dy_tile stores the four codes of w (columns 4*lane.. of the block) at
// row rl (already swizzled) of the transposed tile.
__device__ __forceinline__ void dy_tile(u8 *tile, u32 w, u32 rl, u32 lane) {
#pragma unroll
    for (int j = 0; j < 4; j++) tile[(4 * lane + j) * DY_STRIDE + rl] = (u8)(w >> (8 * j));
}

// dy_put is one row of dy_cast's common case (four columns a lane, every
// store vectorized): it adds v to the column sums, and stores the codes of
// v * s at dst[r, c..c+3] and in the transposed tile.
template <Fp8 F>
__device__ __forceinline__ void dy_put(u8 *dst, u8 *tile, float acc[4], float4 v, float s, u64 r, u64 r0, u64 n,
                                       u64 c, u32 swz, u32 lane) {
    acc[0] += v.x, acc[1] += v.y, acc[2] += v.z, acc[3] += v.w;
    const u32 w = encode4<F>(make_float4(__fmul_rn(v.x, s), __fmul_rn(v.y, s), __fmul_rn(v.z, s), __fmul_rn(v.w, s)));
    *reinterpret_cast<u32 *>(dst + r * n + c) = w;
    dy_tile(tile, w, (u32)(r - r0) ^ swz, lane);
}

// dy_cast: block (x, c) takes rows [c*COL_CHUNK, (c+1)*COL_CHUNK) and
// columns [DY_COLS*x, DY_COLS*(x+1)) of dy [rows, n]; lane l of warp g
// the four columns 4l.. of that range in rows g, g+COL_GROUPS, ... of the
// chunk, in order. For each value v it writes encode(v * scale) (the
// product rounded to float32, as quant_cast casts) to dst[r, i] and, through
// the shared tile, to dstT[i, r]; and it sums v per column in the order
// of column_sum_partial (each warp's rows in order from zero, then the
// COL_GROUPS warp sums in order from zero), the chunk's sums going to
// part[c, i]: gpt_column_sum_final then gives GPTColumnSum's bits.
//
// The tile holds the codes of column j of the block at tile[j*DY_STRIDE
// + (row ^ 4*((j >> 5) & 3))]: the XOR spreads a warp's byte stores (one
// row, 128 columns) over the 32 banks and keeps each aligned group of
// four rows in one word for the transposed stores.
template <Fp8 F, class T>
__device__ __forceinline__ void dy_cast(u8 *dst, u8 *dstT, float *part, const T *dy, const float *scale, u64 rows,
                                        u64 n) {
    __shared__ u32 tile32[DY_COLS * DY_STRIDE / 4];
    __shared__ float4 sums[COL_GROUPS][DY_COLS / 4];
    u8 *tile = reinterpret_cast<u8 *>(tile32);
    const u32 lane = threadIdx.x & 31, g = threadIdx.x >> 5;
    const u64 x0 = (u64)blockIdx.x * DY_COLS, r0 = (u64)blockIdx.y * COL_CHUNK, r1 = min(rows, r0 + COL_CHUNK);
    const u64 c = x0 + 4 * lane;
    const int cnt = c < n ? (int)min((u64)4, n - c) : 0;
    // Every row start is aligned when n is a multiple of 4 and the bases are.
    const bool nvec = (n & 3) == 0, vin = nvec && cnt == 4 && aligned(dy, 4 * sizeof(T)),
               vout = nvec && cnt == 4 && aligned(dst, 4);
    const u32 swz = 4 * ((lane >> 3) & 3); // the XOR of the lane's columns 4l.. (j >> 5 = l >> 3)
    const float s = *scale;
    float acc[4] = {0, 0, 0, 0};
    u64 r = r0 + g;
    if (vin && vout) {
        // The common case: DY_BATCH rows loaded before any is processed, so
        // that a warp has that many loads in flight (the compiler cannot move
        // a row's load above the previous row's stores, which may alias dy).
        for (; r + (DY_BATCH - 1) * COL_GROUPS < r1; r += DY_BATCH * COL_GROUPS) {
            typename Raw4<T>::type q[DY_BATCH];
#pragma unroll
            for (int k = 0; k < DY_BATCH; k++) q[k] = raw4(dy + (r + k * COL_GROUPS) * n + c);
#pragma unroll
            for (int k = 0; k < DY_BATCH; k++)
                dy_put<F>(dst, tile, acc, widen(q[k]), s, r + k * COL_GROUPS, r0, n, c, swz, lane);
        }
        for (; r < r1; r += COL_GROUPS) dy_put<F>(dst, tile, acc, widen(raw4(dy + r * n + c)), s, r, r0, n, c, swz, lane);
    }
#pragma unroll 4
    for (; r < r1; r += COL_GROUPS) {
        float v[4];
        dy_quad(v, dy, r * n + c, cnt, vin);
        u32 w = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) acc[j] += v[j];
        if (cnt == 4) {
            w = encode4<F>(make_float4(__fmul_rn(v[0], s), __fmul_rn(v[1], s), __fmul_rn(v[2], s), __fmul_rn(v[3], s)));
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (j < cnt) w |= encode<F>(__fmul_rn(v[j], s)) << (8 * j);
        }
        if (vout) {
            *reinterpret_cast<u32 *>(dst + r * n + c) = w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (j < cnt) dst[r * n + c + j] = (u8)(w >> (8 * j));
        }
        dy_tile(tile, w, (u32)(r - r0) ^ swz, lane);
    }
    sums[g][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (threadIdx.x < DY_COLS && x0 + threadIdx.x < n) {
        const float *col = reinterpret_cast<const float *>(sums) + threadIdx.x;
        float t = 0;
        for (int k = 0; k < COL_GROUPS; k++) t += col[k * DY_COLS];
        part[(u64)blockIdx.y * n + x0 + threadIdx.x] = t;
    }
    // The transposed tile: column j of the block is row x0 + j of dstT,
    // its rows r0..r1 contiguous there; a word (four rows) per thread.
    const u64 len = r1 - r0, words = DY_COLS * (COL_CHUNK / 4);
    const bool wvec = (rows & 3) == 0 && aligned(dstT, 4);
    for (u64 k = threadIdx.x; k < words; k += blockDim.x) {
        const u64 j = k / (COL_CHUNK / 4), q = 4 * (k % (COL_CHUNK / 4));
        if (x0 + j >= n || q >= len) continue;
        const u8 *src = tile + j * DY_STRIDE;
        const u32 sw = 4 * ((j >> 5) & 3);
        u8 *out = dstT + (x0 + j) * rows + r0 + q;
        if (wvec) {
            *reinterpret_cast<u32 *>(out) = *reinterpret_cast<const u32 *>(src + (q ^ sw));
        } else {
            for (u64 e = q; e < min(q + 4, len); e++) out[e - q] = src[e ^ sw];
        }
    }
}

} // namespace gptdy

#define GPT_DY_CAST(fmt, F, tn, T)                                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * COL_GROUPS)                                                    \
        gpt_dy_cast_##fmt##_##tn(u8 *dst, u8 *dstT, float *part, const T *dy, const float *scale, u64 rows, u64 n) { \
        gptdy::dy_cast<F>(dst, dstT, part, dy, scale, rows, n);                                                      \
    }
GPT_DY_CAST(e4m3, E4M3, f32, float)
GPT_DY_CAST(e4m3, E4M3, bf16, u16)
GPT_DY_CAST(e5m2, E5M2, f32, float)
GPT_DY_CAST(e5m2, E5M2, bf16, u16)
