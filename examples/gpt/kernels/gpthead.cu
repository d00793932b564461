// gpthead.cu: the tied output head of examples/gpt's decoder, whose weight
// is the bfloat16 token embedding that the FP8 GEMMs do not take: the three
// products of model.Linear and LinearBackward (without bias) as tiled
// float32 GEMMs through shared memory.
//
// Block (x, y, z) computes the 64x64 output tile (rows 64y.., columns
// 64x..) over the z-th slice of the summed index; each of its 256 threads
// holds a 4x4 piece. Every output is one thread's sum over the summed index
// in increasing order, with fused multiply-adds (__fmaf_rn), so results
// repeat bit for bit. The weight gradient, whose summed index (the rows) is
// long and whose output is small, is split into slices written to scratch
// and added in slice order by gpt_column_sum_final (gptcols.cu).
//
// gpt_round_bf16 rounds the head's operands, logits and gradients to
// bfloat16 where PyTorch's autocast does (examples/gpt -head bf16).
#include "gpt.cuh"

using namespace distopt;

#define HT 64 // output tile side
#define HK 16 // summed-index step

// A named namespace, not an anonymous one: nvcc names the shared arrays of
// functions in an anonymous namespace after a hash of the source's path,
// which would make the generated PTX depend on where it was generated.
namespace gpthead {

__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const u16 *p) { return bf16_to_f32(*p); }

// Mat is an operand read as a [rows, K] matrix: element (i, k) at
// p[i*si + k*sk]. KC says the summed index is the contiguous one (sk == 1,
// else si == 1), which decides how threads map to elements for coalescing.
template <class T, bool KC> struct Mat {
    const T *p;
    u64 si, sk, rows;
};

// load_tile puts the HK x HT slice of a, rows i0.., summed index k..k+HK (at
// most kend), into t[k][i], zeros outside.
template <class T, bool KC>
__device__ __forceinline__ void load_tile(float (*t)[HT + 4], Mat<T, KC> a, u64 i0, u64 k, u64 kend) {
#pragma unroll
    for (int j = 0; j < HT * HK / 256; j++) {
        const u32 e = threadIdx.x + 256 * j;
        const u32 kk = KC ? e % HK : e / HT, ii = KC ? e / HK : e % HT;
        const u64 i = i0 + ii, kx = k + kk;
        t[kk][ii] = i < a.rows && kx < kend ? ldf(a.p + i * a.si + kx * a.sk) : 0.0f;
    }
}

// tile_gemm sets acc[a][b] = sum over k in [k0, k1), increasing, of
// A(m0 + 4ty + a, k)*B(n0 + 4tx + b, k), where ty, tx = thread / 16,
// thread % 16 and m0, n0 = 64*blockIdx.y, 64*blockIdx.x.
template <class TA, bool AK, class TB, bool BK>
__device__ __forceinline__ void tile_gemm(float (&acc)[4][4], Mat<TA, AK> A, Mat<TB, BK> B, u64 k0, u64 k1) {
    __shared__ __align__(16) float as[HK][HT + 4];
    __shared__ __align__(16) float bs[HK][HT + 4];
    const u32 ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const u64 m0 = (u64)blockIdx.y * HT, n0 = (u64)blockIdx.x * HT;
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b] = 0;
    for (u64 k = k0; k < k1; k += HK) {
        load_tile(as, A, m0, k, k1);
        load_tile(bs, B, n0, k, k1);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < HK; kk++) {
            const float4 av = *reinterpret_cast<const float4 *>(&as[kk][4 * ty]);
            const float4 bv = *reinterpret_cast<const float4 *>(&bs[kk][4 * tx]);
            const float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) acc[a][b] = __fmaf_rn(ar[a], br[b], acc[a][b]);
        }
        __syncthreads();
    }
}

// store_tile writes (add: adds) acc to out [M, N] (row stride N).
__device__ __forceinline__ void store_tile(float *out, const float (&acc)[4][4], u64 M, u64 N, bool add) {
    const u64 m = (u64)blockIdx.y * HT + 4 * (threadIdx.x >> 4), n = (u64)blockIdx.x * HT + 4 * (threadIdx.x & 15);
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
            if (m + a < M && n + b < N) {
                float *o = out + (m + a) * N + n + b;
                *o = add ? *o + acc[a][b] : acc[a][b];
            }
}

} // namespace gpthead

using namespace gpthead;

// gpt_linear_bf16 (model.Linear without bias): y[r, o] = sum_i x[r, i]*w[o,
// i], x float32 [rows, in], w bfloat16 [out, in]. Grid (ceil(out/64),
// ceil(rows/64)).
extern "C" __global__ void __launch_bounds__(256)
    gpt_linear_bf16(float *y, const float *x, const u16 *w, u64 rows, u64 in, u64 out) {
    float acc[4][4];
    tile_gemm(acc, Mat<float, true>{x, in, 1, rows}, Mat<u16, true>{w, in, 1, out}, 0, in);
    store_tile(y, acc, rows, out, false);
}

// gpt_linear_bf16_grad_x: dx[r, i] += sum_o dy[r, o]*w[o, i]. Grid
// (ceil(in/64), ceil(rows/64)).
extern "C" __global__ void __launch_bounds__(256)
    gpt_linear_bf16_grad_x(float *dx, const float *dy, const u16 *w, u64 rows, u64 in, u64 out) {
    float acc[4][4];
    tile_gemm(acc, Mat<float, true>{dy, out, 1, rows}, Mat<u16, false>{w, 1, in, in}, 0, out);
    store_tile(dx, acc, rows, in, true);
}

// gpt_linear_bf16_grad_w: the weight gradient over the rows of slice z,
// [z*slice, (z+1)*slice): dw[o, i] += sum_r dy[r, o]*x[r, i] when the grid
// has one slice, else part[z, o, i] = that sum. Grid (ceil(in/64),
// ceil(out/64), slices).
extern "C" __global__ void __launch_bounds__(256)
    gpt_linear_bf16_grad_w(float *dw, float *part, const float *dy, const float *x, u64 rows, u64 in, u64 out,
                           u64 slice) {
    float acc[4][4];
    const u64 k0 = (u64)blockIdx.z * slice;
    tile_gemm(acc, Mat<float, false>{dy, 1, out, out}, Mat<float, false>{x, 1, in, in}, k0, min(rows, k0 + slice));
    if (gridDim.z == 1)
        store_tile(dw, acc, out, in, true);
    else
        store_tile(part + (u64)blockIdx.z * out * in, acc, out, in, false);
}

// gpt_round_bf16 (model.RoundBF16, the roundings of the head under
// PyTorch's autocast): y[i] = bf16(x[i]), widened back to float32, for
// i < n; with add, y[i] += bf16(x[i]) (the float32 sum). bf16 rounds to
// nearest even by cvt.rn.bf16.f32: overflow to +-Inf, NaN to a NaN. y may
// be x (in place, without add).
extern "C" __global__ void gpt_round_bf16(float *y, const float *x, u64 n, u32 add) {
    for (u64 e = thread_index(); e < n; e += grid_stride()) {
        const float r = bf16_to_f32(bf16_rn(x[e]));
        y[e] = add ? y[e] + r : r;
    }
}
