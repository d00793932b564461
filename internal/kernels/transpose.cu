// transpose.cu: exact transposes for the FP8 GEMMs (package gemm): the bytes
// of an FP8 matrix, and the float32 grid of its 128x128 tile scales.
//
// Both are pure data movement: the transpose of a per-tensor or 128x128-tile
// FP8 matrix is the FP8 matrix of the transpose, bit for bit.
#include "common.cuh"

using namespace distopt;

// TILE x TILE bytes per block of 256 threads.
static const u32 TILE = 64;

// transpose4x4 transposes the 4x4 bytes held as four rows a[0..3] (byte j
// of a[i] is element (i, j)) into c[0..3] (byte i of c[j] is element (i,
// j)).
__device__ __forceinline__ void transpose4x4(const u32 a[4], u32 c[4]) {
    const u32 t0 = __byte_perm(a[0], a[1], 0x5140), t1 = __byte_perm(a[0], a[1], 0x7362);
    const u32 t2 = __byte_perm(a[2], a[3], 0x5140), t3 = __byte_perm(a[2], a[3], 0x7362);
    c[0] = __byte_perm(t0, t2, 0x5410), c[1] = __byte_perm(t0, t2, 0x7632);
    c[2] = __byte_perm(t1, t3, 0x5410), c[3] = __byte_perm(t1, t3, 0x7632);
}

// full_tile moves one whole 64x64 tile whose rows are 4-byte aligned: each
// thread reads a 4x4 block as four 32-bit words (a warp covers 4 row groups
// x 32 bytes: whole sectors), transposes it in registers, and stores its
// four columns as words in shared memory (row pitch 17 words: no bank
// conflicts); then each row of dst (a column of the tile) is written as 16
// words by 16 threads.
__device__ __forceinline__ void full_tile(u8 *dst, const u8 *src, u64 rows, u64 cols, u64 r0, u64 c0) {
    __shared__ u32 sm[TILE][TILE / 4 + 1];
    const u32 t = threadIdx.x, lane = t & 31, w = t >> 5;
    const u32 k = (w & 1) * 8 + (lane & 7), g = (w >> 1) * 4 + (lane >> 3); // word column, row group
    u32 a[4], c[4];
    for (u32 i = 0; i < 4; i++)
        a[i] = *reinterpret_cast<const u32 *>(src + (r0 + 4 * g + i) * cols + c0 + 4 * k);
    transpose4x4(a, c);
    for (u32 i = 0; i < 4; i++) sm[4 * k + i][g] = c[i];
    __syncthreads();
    for (u32 p = 0; p < 4; p++) {
        const u32 col = p * 16 + (t >> 4), gw = t & 15;
        *reinterpret_cast<u32 *>(dst + (c0 + col) * rows + r0 + 4 * gw) = sm[col][gw];
    }
}

// fp8_transpose: dst[c*rows + r] = src[r*cols + c] for r < rows, c < cols
// (src row-major rows x cols, dst row-major cols x rows). Block (bx, by)
// moves the tile of src rows by*64.. and columns bx*64... Whole tiles of
// 4-byte aligned rows go through full_tile; edge tiles byte by byte.
extern "C" __global__ void fp8_transpose(u8 *dst, const u8 *src, u64 rows, u64 cols) {
    const u64 r0 = (u64)blockIdx.y * TILE, c0 = (u64)blockIdx.x * TILE;
    const bool full = r0 + TILE <= rows && c0 + TILE <= cols && (cols & 3) == 0 && (rows & 3) == 0 &&
                      aligned(src, 4) && aligned(dst, 4);
    if (full) {
        full_tile(dst, src, rows, cols, r0, c0);
        return;
    }
    __shared__ u8 tile[TILE][TILE + 4];
    for (u32 i = threadIdx.x; i < TILE * TILE; i += blockDim.x) {
        const u32 r = i / TILE, c = i % TILE;
        if (r0 + r < rows && c0 + c < cols) tile[r][c] = src[(r0 + r) * cols + c0 + c];
    }
    __syncthreads();
    for (u32 i = threadIdx.x; i < TILE * TILE; i += blockDim.x) {
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
