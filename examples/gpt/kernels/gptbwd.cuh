// gptbwd.cuh: the device code of examples/gpt's backward kernels that the
// separate kernels (gpt.cu, gptrows.cu, gptcols.cu) share with gptbwd.cu's,
// which also fold the amax of what they write (the next linear layer's
// output gradient, so that package gemm skips its amax pass) and read or
// write bfloat16 gradients (gpumodel.Options.GradBF16). One definition,
// so both compute the same bits. T is the element type of a gradient read
// (float, or u16 for bfloat16, widened exactly); AMAX asks for the amax
// key (amax_bits) of every float32 value written to be folded into *amax
// (skipped when amax is null).
#pragma once
#include "gpt.cuh"

#define COL_GROUPS 8
#define COL_CHUNK 256

namespace distopt {

// elem_at returns element i of a float32 or bfloat16 tensor as a float.
__device__ __forceinline__ float elem_at(const float *p, u64 i) { return p[i]; }
__device__ __forceinline__ float elem_at(const u16 *p, u64 i) { return bf16_to_f32(p[i]); }

// quad_at returns elements 4c..4c+3 of a row at p (16-byte aligned for
// float32, 8-byte for bfloat16) as a float4.
__device__ __forceinline__ float4 quad_at(const float *p, u64 c) { return reinterpret_cast<const float4 *>(p)[c]; }
__device__ __forceinline__ float4 quad_at(const u16 *p, u64 c) { return bf16x4(p + 4 * c); }

// fold_amax folds the amax keys k of the calling block into *amax (every
// thread of the block calls it) when AMAX and amax is not null.
template <bool AMAX> __device__ __forceinline__ void fold_amax(u32 *amax, u32 k) {
    if (AMAX && amax != nullptr) block_max_atomic(amax, k);
}

// ln_grad_x_rows is the dx part of model.LayerNormBackward with the row in
// registers (gptrows.cu's layout): with xhat = (x-mean)*rstd and g = dy*w,
// dx += rstd*(g - mean(g) - xhat*mean(g*xhat)).
template <int V, class T, bool AMAX>
__device__ __forceinline__ void ln_grad_x_rows(float *dx, const T *dy, const float *x, const float *mean,
                                               const float *rstd, const u16 *w, u64 rows, u64 n, u32 *amax) {
    const u32 lane = threadIdx.x & 31;
    const u64 n4 = n >> 2;
    u32 k = 0;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        const float4 *xr = reinterpret_cast<const float4 *>(x + r * n);
        const T *dyr = dy + r * n;
        const float m = mean[r], rs = rstd[r];
        float4 g[V], xh[V];
        float sg = 0, sgx = 0;
#pragma unroll
        for (int j = 0; j < V; j++) {
            const u64 c = lane + 32 * j;
            g[j] = f4(0);
            xh[j] = f4(0);
            if (c < n4) {
                const float4 d = quad_at(dyr, c), xv = xr[c], wv = bf16x4(w + 4 * c);
                g[j] = make_float4(d.x * wv.x, d.y * wv.y, d.z * wv.z, d.w * wv.w);
                xh[j] = make_float4((xv.x - m) * rs, (xv.y - m) * rs, (xv.z - m) * rs, (xv.w - m) * rs);
            }
            sg += hsum4(g[j]);
            sgx += (g[j].x * xh[j].x + g[j].y * xh[j].y) + (g[j].z * xh[j].z + g[j].w * xh[j].w);
        }
        const float mg = warp_sum(sg) / (float)n, mgx = warp_sum(sgx) / (float)n;
        float4 *dxr = reinterpret_cast<float4 *>(dx + r * n);
#pragma unroll
        for (int j = 0; j < V; j++) {
            const u64 c = lane + 32 * j;
            if (c < n4) {
                float4 o = dxr[c];
                o.x += rs * (g[j].x - mg - xh[j].x * mgx);
                o.y += rs * (g[j].y - mg - xh[j].y * mgx);
                o.z += rs * (g[j].z - mg - xh[j].z * mgx);
                o.w += rs * (g[j].w - mg - xh[j].w * mgx);
                dxr[c] = o;
                if (AMAX) k = max(k, amax4(o));
            }
        }
    }
    fold_amax<AMAX>(amax, k);
}

// ln_grad_x_any is ln_grad_x_rows for rows of any width, read from memory
// (lane l: elements l, l+32, ... in order, then the warp butterfly).
template <class T, bool AMAX>
__device__ __forceinline__ void ln_grad_x_any(float *dx, const T *dy, const float *x, const float *mean,
                                              const float *rstd, const u16 *w, u64 rows, u64 n, u32 *amax) {
    const u32 lane = threadIdx.x & 31;
    u32 k = 0;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        const float *xr = x + r * n;
        const T *dyr = dy + r * n;
        const float m = mean[r], rs = rstd[r];
        float sg = 0, sgx = 0;
        for (u64 i = lane; i < n; i += 32) {
            const float g = elem_at(dyr, i) * bf16_to_f32(w[i]);
            sg += g;
            sgx += g * ((xr[i] - m) * rs);
        }
        const float mg = warp_sum(sg) / (float)n, mgx = warp_sum(sgx) / (float)n;
        for (u64 i = lane; i < n; i += 32) {
            const float xhat = (xr[i] - m) * rs;
            dx[r * n + i] += rs * (elem_at(dyr, i) * bf16_to_f32(w[i]) - mg - xhat * mgx);
            if (AMAX) k = max(k, amax_bits(dx[r * n + i]));
        }
    }
    fold_amax<AMAX>(amax, k);
}

// col_block_sum adds the COL_GROUPS warp sums of the calling block in
// order and returns the total to the threads of warp 0 (lane = column).
__device__ __forceinline__ float col_block_sum(float v, float (*s)[32]) {
    const u32 lane = threadIdx.x & 31, g = threadIdx.x >> 5;
    s[g][lane] = v;
    __syncthreads();
    float t = 0;
    if (g == 0)
        for (int k = 0; k < COL_GROUPS; k++) t += s[k][lane];
    return t;
}

// column_sum_partial: part[c, i] = sum of dy[r, i] over the rows r of
// chunk c (gptcols.cu's first pass), s the block's shared sums.
template <class T>
__device__ __forceinline__ void column_sum_partial(float *part, const T *dy, u64 rows, u64 n, float (*s)[32]) {
    const u32 lane = threadIdx.x & 31, g = threadIdx.x >> 5;
    const u64 i = (u64)blockIdx.x * 32 + lane, r1 = min(rows, ((u64)blockIdx.y + 1) * COL_CHUNK);
    float acc = 0;
    if (i < n) {
#pragma unroll 8
        for (u64 r = (u64)blockIdx.y * COL_CHUNK + g; r < r1; r += COL_GROUPS) acc += elem_at(dy, r * n + i);
    }
    const float t = col_block_sum(acc, s);
    if (g == 0 && i < n) part[(u64)blockIdx.y * n + i] = t;
}

// ln_grad_wb_partial (model.LayerNormBackward, dw and db): with xhat =
// (x[r, i]-mean[r])*rstd[r], part[c, i] = sum of dy[r, i]*xhat and
// part[chunks + c, i] = sum of dy[r, i] over the rows r of chunk c.
template <class T>
__device__ __forceinline__ void ln_grad_wb_partial(float *part, const T *dy, const float *x, const float *mean,
                                                   const float *rstd, u64 rows, u64 n, float (*s)[32]) {
    const u32 lane = threadIdx.x & 31, g = threadIdx.x >> 5;
    const u64 i = (u64)blockIdx.x * 32 + lane, r1 = min(rows, ((u64)blockIdx.y + 1) * COL_CHUNK);
    float sw = 0, sb = 0;
    if (i < n) {
#pragma unroll 4
        for (u64 r = (u64)blockIdx.y * COL_CHUNK + g; r < r1; r += COL_GROUPS) {
            const float d = elem_at(dy, r * n + i);
            sw += d * ((x[r * n + i] - mean[r]) * rstd[r]);
            sb += d;
        }
    }
    const float tw = col_block_sum(sw, s);
    __syncthreads();
    const float tb = col_block_sum(sb, s);
    if (g == 0 && i < n) {
        part[(u64)blockIdx.y * n + i] = tw;
        part[((u64)gridDim.y + blockIdx.y) * n + i] = tb;
    }
}

} // namespace distopt
