// gptrows.cu: the row-wise operations of examples/gpt's decoder with the
// row held in registers: LayerNorm forward and input gradient, softmax
// cross-entropy. One warp per row; lane l holds the float4s l, l+32, ...,
// l+32*(V-1) of the row, so a row of n floats needs n a multiple of 4 and
// n <= 128*V, and the row pointers 16-byte aligned (bfloat16 parameters 8).
// Each kernel is compiled for V = 4, 8 and 16 (rows of up to 512, 1024 and
// 2048); the launchers of gpt.go fall back to the any-shape kernels of
// gpt.cu otherwise. The sums run in a fixed order (each lane over its
// float4s in order, then the warp butterfly), so results repeat bit for
// bit; they differ from gpt.cu's in the order of the float32 additions only.
#include "gptbwd.cuh"
#include "gptnorm.cuh"

using namespace distopt;

namespace {

// ln_rows is model.LayerNorm on rows of n = 4*n4 floats: mean, rstd =
// 1/sqrt(var + eps) (biased variance, from the deviations), y =
// (x-mean)*rstd*w + b.
template <int V>
__device__ __forceinline__ void ln_rows(float *y, float *mean, float *rstd, const float *x, const u16 *w,
                                        const u16 *b, u64 rows, u64 n, float eps) {
    const u32 lane = threadIdx.x & 31;
    const u64 n4 = n >> 2;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        float4 v[V];
        ln_load_regs<V>(v, reinterpret_cast<const float4 *>(x + r * n), lane, n4);
        float m, rs;
        ln_stats_regs<V>(v, lane, n4, n, eps, m, rs);
        float4 *yr = reinterpret_cast<float4 *>(y + r * n);
#pragma unroll
        for (int j = 0; j < V; j++) {
            const u64 c = lane + 32 * j;
            if (c < n4) yr[c] = ln_out4(v[j], m, rs, bf16x4(w + 4 * c), bf16x4(b + 4 * c));
        }
        if (lane == 0) {
            mean[r] = m;
            rstd[r] = rs;
        }
    }
}

// ce_rows is model.CrossEntropy and CrossEntropyBackward fused on rows of
// v = 4*v4 logits: loss[r] = log(sum exp(l - max)) + max - l[target[r]],
// and, when dlogits is not null, dlogits[r, i] = coef*(softmax(l)[i] -
// (i == target[r])). The row is read before anything is written, so
// dlogits may be logits.
template <int V>
__device__ __forceinline__ void ce_rows(float *loss, float *dlogits, const float *logits, const int *target, u64 rows,
                                        u64 v, float coef) {
    const u32 lane = threadIdx.x & 31;
    const u64 v4 = v >> 2;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        const float4 *lr = reinterpret_cast<const float4 *>(logits + r * v);
        const int t = target[r];
        const float tl = logits[r * v + t];
        float4 l[V];
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < V; j++) {
            const u64 c = lane + 32 * j;
            l[j] = c < v4 ? lr[c] : f4(-INFINITY);
            mx = fmaxf(mx, fmaxf(fmaxf(l[j].x, l[j].y), fmaxf(l[j].z, l[j].w)));
        }
        mx = warp_max(mx);
        float sum = 0;
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (lane + 32 * j < v4) {
                l[j] = make_float4(expf(l[j].x - mx), expf(l[j].y - mx), expf(l[j].z - mx), expf(l[j].w - mx));
                sum += hsum4(l[j]);
            }
        }
        sum = warp_sum(sum);
        if (lane == 0) loss[r] = logf(sum) + mx - tl;
        if (dlogits == nullptr) continue;
        const float inv = 1.0f / sum;
        float4 *dr = reinterpret_cast<float4 *>(dlogits + r * v);
#pragma unroll
        for (int j = 0; j < V; j++) {
            const u64 c = lane + 32 * j;
            if (c < v4) {
                const u64 i = 4 * c;
                dr[c] = make_float4(coef * (l[j].x * inv - (i == (u64)t ? 1.0f : 0.0f)),
                                    coef * (l[j].y * inv - (i + 1 == (u64)t ? 1.0f : 0.0f)),
                                    coef * (l[j].z * inv - (i + 2 == (u64)t ? 1.0f : 0.0f)),
                                    coef * (l[j].w * inv - (i + 3 == (u64)t ? 1.0f : 0.0f)));
            }
        }
    }
}

} // namespace

// The kernels, for V = 4, 8 and 16 (gpt_layernorm_v4 and so on).
#define GPT_ROW_KERNELS(V)                                                                                             \
    extern "C" __global__ void gpt_layernorm_v##V(float *y, float *mean, float *rstd, const float *x, const u16 *w,  \
                                                  const u16 *b, u64 rows, u64 n, float eps) {                          \
        ln_rows<V>(y, mean, rstd, x, w, b, rows, n, eps);                                                              \
    }                                                                                                                  \
    extern "C" __global__ void gpt_layernorm_grad_x_v##V(float *dx, const float *dy, const float *x,                  \
                                                         const float *mean, const float *rstd, const u16 *w, u64 rows, \
                                                         u64 n) {                                                      \
        ln_grad_x_rows<V, float, false>(dx, dy, x, mean, rstd, w, rows, n, nullptr);                                   \
    }                                                                                                                  \
    extern "C" __global__ void gpt_cross_entropy_v##V(float *loss, float *dlogits, const float *logits,               \
                                                      const int *target, u64 rows, u64 v, float coef) {                \
        ce_rows<V>(loss, dlogits, logits, target, rows, v, coef);                                                      \
    }

GPT_ROW_KERNELS(4)
GPT_ROW_KERNELS(8)
GPT_ROW_KERNELS(16)
