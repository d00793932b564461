// gpthead.cu: the tied output head of examples/gpt's decoder, whose weight
// is the bfloat16 token embedding that the FP8 GEMMs do not take: the three
// products of model.Linear and LinearBackward (without bias) as tiled
// float32 GEMMs through shared memory.
//
// Block (x, y, z) computes the 128x128 output tile (rows 128y.., columns
// 128x..) over the z-th slice of the summed index; each of its 256 threads
// holds an 8x8 piece (64 fused multiply-adds for every four float4 reads
// of shared memory). Every output is one thread's sum over the summed index
// in increasing order, with fused multiply-adds (__fmaf_rn), so results
// repeat bit for bit. The weight gradient, whose summed index (the rows) is
// long and whose output is small, is split into slices written to scratch
// and added in slice order by gpt_column_sum_final (gptcols.cu).
//
// gpt_round_bf16 rounds the head's operands, logits and gradients to
// bfloat16 where PyTorch's autocast does (examples/gpt -head bf16).
#include "gpt.cuh"

using namespace distopt;

#define HT 128 // output tile side
#define HK 16  // summed-index step

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
// most kend), into t[k][i], zeros outside. All of a thread's loads are
// issued before the first store to shared memory.
template <class T, bool KC>
__device__ __forceinline__ void load_tile(float (*t)[HT + 4], Mat<T, KC> a, u64 i0, u64 k, u64 kend) {
    constexpr int E = HT * HK / 256;
    float v[E];
#pragma unroll
    for (int j = 0; j < E; j++) {
        const u32 e = threadIdx.x + 256 * j;
        const u32 kk = KC ? e % HK : e / HT, ii = KC ? e / HK : e % HT;
        const u64 i = i0 + ii, kx = k + kk;
        v[j] = i < a.rows && kx < kend ? ldf(a.p + i * a.si + kx * a.sk) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < E; j++) {
        const u32 e = threadIdx.x + 256 * j;
        t[KC ? e % HK : e / HT][KC ? e / HK : e % HT] = v[j];
    }
}

// tile_gemm sets acc[a][b] = sum over k in [k0, k1), increasing, of
// A(m0 + row(ty, a), k)*B(n0 + row(tx, b), k), where ty, tx = thread / 16,
// thread % 16, m0, n0 = 128*blockIdx.y, 128*blockIdx.x and row(t, a) =
// 4t + a for a < 4, 64 + 4t + (a - 4) after: each thread holds an 8x8
// piece as four 4x4 blocks, so that its shared-memory reads are float4s
// that a warp takes without bank conflicts. Every output is one thread's
// chain of fused multiply-adds over k in order: the result does not depend
// on the tile shape, and repeats bit for bit.
template <class TA, bool AK, class TB, bool BK>
__device__ __forceinline__ void tile_gemm(float (&acc)[8][8], Mat<TA, AK> A, Mat<TB, BK> B, u64 k0, u64 k1) {
    __shared__ __align__(16) float as[HK][HT + 4];
    __shared__ __align__(16) float bs[HK][HT + 4];
    const u32 ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const u64 m0 = (u64)blockIdx.y * HT, n0 = (u64)blockIdx.x * HT;
#pragma unroll
    for (int a = 0; a < 8; a++)
#pragma unroll
        for (int b = 0; b < 8; b++) acc[a][b] = 0;
    for (u64 k = k0; k < k1; k += HK) {
        load_tile(as, A, m0, k, k1);
        load_tile(bs, B, n0, k, k1);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < HK; kk++) {
            const float4 a0 = *reinterpret_cast<const float4 *>(&as[kk][4 * ty]);
            const float4 a1 = *reinterpret_cast<const float4 *>(&as[kk][64 + 4 * ty]);
            const float4 b0 = *reinterpret_cast<const float4 *>(&bs[kk][4 * tx]);
            const float4 b1 = *reinterpret_cast<const float4 *>(&bs[kk][64 + 4 * tx]);
            const float ar[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float br[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int a = 0; a < 8; a++)
#pragma unroll
                for (int b = 0; b < 8; b++) acc[a][b] = __fmaf_rn(ar[a], br[b], acc[a][b]);
        }
        __syncthreads();
    }
}

// store_tile writes (add: adds) acc to out [M, N] (row stride N), in
// tile_gemm's layout: each run of four columns as one float4 where it lies
// inside out and N and out allow 16-byte accesses.
__device__ __forceinline__ void store_tile(float *out, const float (&acc)[8][8], u64 M, u64 N, bool add) {
    const u64 m = (u64)blockIdx.y * HT + 4 * (threadIdx.x >> 4), n = (u64)blockIdx.x * HT + 4 * (threadIdx.x & 15);
    const bool vec = (N & 3) == 0 && aligned(out, 16);
#pragma unroll
    for (int a = 0; a < 8; a++) {
        const u64 r = m + (a & 3) + 64 * (a >> 2);
        if (r >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const u64 c = n + 64 * h;
            if (vec && c + 3 < N) {
                float4 *o = reinterpret_cast<float4 *>(out + r * N + c);
                float4 v = make_float4(acc[a][4 * h], acc[a][4 * h + 1], acc[a][4 * h + 2], acc[a][4 * h + 3]);
                if (add) {
                    const float4 p = *o;
                    v = make_float4(p.x + v.x, p.y + v.y, p.z + v.z, p.w + v.w);
                }
                *o = v;
                continue;
            }
#pragma unroll
            for (int b = 0; b < 4; b++)
                if (c + b < N) {
                    float *o = out + r * N + c + b;
                    *o = add ? *o + acc[a][4 * h + b] : acc[a][4 * h + b];
                }
        }
    }
}

} // namespace gpthead

using namespace gpthead;

// gpt_linear_bf16 (model.Linear without bias): y[r, o] = sum_i x[r, i]*w[o,
// i], x float32 [rows, in], w bfloat16 [out, in]. Grid (ceil(out/128),
// ceil(rows/128)).
extern "C" __global__ void __launch_bounds__(256, 2)
    gpt_linear_bf16(float *y, const float *x, const u16 *w, u64 rows, u64 in, u64 out) {
    float acc[8][8];
    tile_gemm(acc, Mat<float, true>{x, in, 1, rows}, Mat<u16, true>{w, in, 1, out}, 0, in);
    store_tile(y, acc, rows, out, false);
}

// gpt_linear_bf16_grad_x: dx[r, i] += sum_o dy[r, o]*w[o, i]. Grid
// (ceil(in/128), ceil(rows/128)).
extern "C" __global__ void __launch_bounds__(256, 2)
    gpt_linear_bf16_grad_x(float *dx, const float *dy, const u16 *w, u64 rows, u64 in, u64 out) {
    float acc[8][8];
    tile_gemm(acc, Mat<float, true>{dy, out, 1, rows}, Mat<u16, false>{w, 1, in, in}, 0, out);
    store_tile(dx, acc, rows, in, true);
}

// gpt_linear_bf16_grad_w: the weight gradient over the rows of slice z,
// [z*slice, (z+1)*slice): dw[o, i] += sum_r dy[r, o]*x[r, i] when the grid
// has one slice, else part[z, o, i] = that sum. Grid (ceil(in/128),
// ceil(out/128), slices).
extern "C" __global__ void __launch_bounds__(256, 2)
    gpt_linear_bf16_grad_w(float *dw, float *part, const float *dy, const float *x, u64 rows, u64 in, u64 out,
                           u64 slice) {
    float acc[8][8];
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

// gpt_round_bf16_pack: b = bf16(x[i]); y16[i] = b and y[i] = b widened back
// to float32, for i < n (gpt_round_bf16's rounding): the bfloat16 copy
// feeds the head's products on the tensor cores. y may be x.
extern "C" __global__ void gpt_round_bf16_pack(float *y, u16 *y16, const float *x, u64 n) {
    for (u64 e = thread_index(); e < n; e += grid_stride()) {
        const u16 b = (u16)bf16_rn(x[e]);
        y16[e] = b;
        y[e] = bf16_to_f32(b);
    }
}
