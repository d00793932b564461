// transpose.cu: exact transposes for the FP8 GEMMs (package gemm): the bytes
// of an FP8 matrix, and the float32 grid of its 128x128 tile scales.
//
// Both are pure data movement: the transpose of a per-tensor or 128x128-tile
// FP8 matrix is the FP8 matrix of the transpose, bit for bit.
#include "common.cuh"

using namespace distopt;

// TILE x TILE bytes per block of 256 threads.
static const u32 TILE = 64;

// fp8_transpose: dst[c*rows + r] = src[r*cols + c] for r < rows, c < cols
// (src row-major rows x cols, dst row-major cols x rows). Block (bx, by)
// moves the tile of src rows by*64.. and columns bx*64... Full tiles of
// 4-byte aligned rows move as 32-bit words; edge tiles byte by byte.
extern "C" __global__ void fp8_transpose(u8 *dst, const u8 *src, u64 rows, u64 cols) {
    __shared__ u8 tile[TILE][TILE + 4];
    const u64 r0 = (u64)blockIdx.y * TILE, c0 = (u64)blockIdx.x * TILE;
    const u32 t = threadIdx.x;
    const bool full = r0 + TILE <= rows && c0 + TILE <= cols && (cols & 3) == 0 && (rows & 3) == 0 &&
                      aligned(src, 4) && aligned(dst, 4);
    if (full) {
        // 16 threads per 64-byte row, 16 rows per pass, 4 passes.
        const u32 cw = t & 15, rr = t >> 4;
        for (u32 p = 0; p < 4; p++) {
            const u32 r = rr + 16 * p;
            const u32 w = *reinterpret_cast<const u32 *>(src + (r0 + r) * cols + c0 + 4 * cw);
            tile[r][4 * cw + 0] = (u8)w;
            tile[r][4 * cw + 1] = (u8)(w >> 8);
            tile[r][4 * cw + 2] = (u8)(w >> 16);
            tile[r][4 * cw + 3] = (u8)(w >> 24);
        }
        __syncthreads();
        for (u32 p = 0; p < 4; p++) {
            const u32 c = rr + 16 * p; // a column of the tile: a row of dst
            const u32 w = (u32)tile[4 * cw][c] | (u32)tile[4 * cw + 1][c] << 8 |
                          (u32)tile[4 * cw + 2][c] << 16 | (u32)tile[4 * cw + 3][c] << 24;
            *reinterpret_cast<u32 *>(dst + (c0 + c) * rows + r0 + 4 * cw) = w;
        }
        return;
    }
    for (u32 i = t; i < TILE * TILE; i += blockDim.x) {
        const u32 r = i / TILE, c = i % TILE;
        if (r0 + r < rows && c0 + c < cols) tile[r][c] = src[(r0 + r) * cols + c0 + c];
    }
    __syncthreads();
    for (u32 i = t; i < TILE * TILE; i += blockDim.x) {
        const u32 c = i / TILE, r = i % TILE;
        if (r0 + r < rows && c0 + c < cols) dst[(c0 + c) * rows + r0 + r] = tile[r][c];
    }
}

// scale_grid_copy copies a row-major rows x cols grid of float32 with row
// pitch src_ld into dst with row pitch dst_ld, transposed when transpose is
// non-zero: dst[c*dst_ld + r] = src[r*src_ld + c]; else dst[r*dst_ld + c] =
// src[r*src_ld + c]. Padding elements of dst (past cols, or rows when
// transposed) are set to 1.0f so that every byte of dst is defined.
extern "C" __global__ void scale_grid_copy(float *dst, u64 dst_ld, const float *src, u64 src_ld, u64 rows,
                                           u64 cols, u32 transpose) {
    const u64 out_rows = transpose ? cols : rows, out_cols = transpose ? rows : cols;
    for (u64 i = thread_index(); i < out_rows * dst_ld; i += grid_stride()) {
        const u64 orow = i / dst_ld, ocol = i % dst_ld;
        float v = 1.0f;
        if (ocol < out_cols) v = transpose ? src[ocol * src_ld + orow] : src[orow * src_ld + ocol];
        dst[i] = v;
    }
}
