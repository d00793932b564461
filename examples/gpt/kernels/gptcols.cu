// gptcols.cu: the column reductions of examples/gpt's decoder (bias
// gradients, LayerNorm weight and bias gradients, the token embedding's
// gradient), in two passes of fixed order instead of atomics, so that
// results repeat bit for bit:
//
//  1. a partial kernel: block (x, c) sums the rows of chunk c (rows
//     [c*COL_CHUNK, (c+1)*COL_CHUNK)) of columns [32x, 32x+32): warp g of
//     the block takes rows g, g+COL_GROUPS, ... of the chunk in order, then
//     the COL_GROUPS warp sums are added in order g = 0, 1, ...; the result
//     goes to part[c, i] (scratch of chunks*n floats);
//  2. gpt_column_sum_final adds part[0, i], part[1, i], ... in order to the
//     destination.
//
// The float32 additions are thus grouped differently from the row-by-row
// order of the float64 reference (model.LinearBackward, LayerNormBackward).
#include "gptbwd.cuh"

using namespace distopt;

// gpt_column_sum_partial: part[c, i] = sum of dy[r, i] over the rows r of
// chunk c. Grid (ceil(n/32), chunks), COL_GROUPS warps per block.
extern "C" __global__ void __launch_bounds__(32 * COL_GROUPS)
    gpt_column_sum_partial(float *part, const float *dy, u64 rows, u64 n) {
    __shared__ float s[COL_GROUPS][32];
    column_sum_partial(part, dy, rows, n, s);
}

// gpt_layernorm_grad_wb_partial (model.LayerNormBackward, dw and db): with
// xhat = (x[r, i]-mean[r])*rstd[r], part[c, i] = sum of dy[r, i]*xhat and
// part[chunks + c, i] = sum of dy[r, i] over the rows r of chunk c.
extern "C" __global__ void __launch_bounds__(32 * COL_GROUPS)
    gpt_layernorm_grad_wb_partial(float *part, const float *dy, const float *x, const float *mean, const float *rstd,
                                  u64 rows, u64 n) {
    __shared__ float s[COL_GROUPS][32];
    ln_grad_wb_partial(part, dy, x, mean, rstd, rows, n, s);
}

// COL_FINAL_LOADS: the partial sums gpt_column_sum_final loads before it
// adds any, so that a thread keeps that many loads in flight (its column
// has a chunk count of partials, 64 for 16384 rows, read from L2).
#define COL_FINAL_LOADS 16

// col_total returns part[0, i] + part[1, i] + ... + part[chunks-1, i] of
// the n columns of part, added in that order from 0.
__device__ __forceinline__ float col_total(const float *part, u64 chunks, u64 n, u64 i) {
    float s = 0;
    u64 c = 0;
    for (; c + COL_FINAL_LOADS <= chunks; c += COL_FINAL_LOADS) {
        float v[COL_FINAL_LOADS];
#pragma unroll
        for (int j = 0; j < COL_FINAL_LOADS; j++) v[j] = part[(c + j) * n + i];
#pragma unroll
        for (int j = 0; j < COL_FINAL_LOADS; j++) s += v[j];
    }
    for (; c < chunks; c++) s += part[c * n + i];
    return s;
}

// gpt_column_sum_final: dst[i] += part[0, i] + part[1, i] + ... +
// part[chunks-1, i] (added in that order) for i < n; and, when dst2 is not
// null, dst2[i] += the same of part[chunks + c, i].
extern "C" __global__ void gpt_column_sum_final(float *dst, float *dst2, const float *part, u64 chunks, u64 n) {
    for (u64 i = thread_index(); i < n; i += grid_stride()) {
        if (dst2 == nullptr) {
            dst[i] += col_total(part, chunks, n, i);
        } else {
            const float s = col_total(part, chunks, n, i), s2 = col_total(part + chunks * n, chunks, n, i);
            dst[i] += s;
            dst2[i] += s2;
        }
    }
}

#define EMB_WARPS 32
#define EMB_COLS 128

// gpt_embed_grad_tokens (model.EmbedBackward, token part): for every
// vocabulary row v and column i, dwte[v, i] += sum of dx[r, i] over the rows
// r listed in order[start[v] : start[v+1]] (the rows holding token v). Block
// (v, y) takes the columns [EMB_COLS*y, EMB_COLS*(y+1)) of token v; its warp
// w sums the listed rows w, w+EMB_WARPS, ... in order, then the warp sums
// are added in order w = 0, 1, ... One pass, no scratch: the most frequent
// token's rows are spread over EMB_WARPS warps per column tile.
extern "C" __global__ void __launch_bounds__(32 * EMB_WARPS)
    gpt_embed_grad_tokens(float *dwte, const float *dx, const int *order, const int *start, u64 vocab, u64 h) {
    __shared__ float part[EMB_WARPS][EMB_COLS];
    const u32 lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const u64 v = blockIdx.x, c0 = (u64)blockIdx.y * EMB_COLS;
    float acc[EMB_COLS / 32];
#pragma unroll
    for (int j = 0; j < EMB_COLS / 32; j++) acc[j] = 0;
    const int end = start[v + 1];
#pragma unroll 4
    for (int k = start[v] + w; k < end; k += EMB_WARPS) {
        const float *row = dx + (u64)order[k] * h + c0;
#pragma unroll
        for (int j = 0; j < EMB_COLS / 32; j++)
            if (c0 + lane + 32 * j < h) acc[j] += row[lane + 32 * j];
    }
#pragma unroll
    for (int j = 0; j < EMB_COLS / 32; j++) part[w][lane + 32 * j] = acc[j];
    __syncthreads();
    const u64 i = c0 + threadIdx.x;
    if (threadIdx.x < EMB_COLS && i < h) {
        float s = 0;
        for (int k = 0; k < EMB_WARPS; k++) s += part[k][threadIdx.x];
        dwte[v * h + i] += s;
    }
}
