// flash.cu: the attention kernels the GPT model launches (flash.go's
// flashDefault): the wide forward, the backward's preparation, the pipe
// dK/dV and dQ kernels, and the wide dQ kernel at D = 128. The device code
// and the kernels' contracts are in flash.cuh; the other variants, which
// the tests and benchmarks compare, in flashalt.cu.
#include "flash.cuh"

FLASH_FWD(flash_fwd_d64_wide, flash_fwd_w<64, 2>)
FLASH_FWD(flash_fwd_d128_wide, flash_fwd_w<128, 2>)
FLASH_DQ(flash_bwd_dq_d64_pipe, flash_dq_w<64, 64, 1>)
FLASH_DQ(flash_bwd_dq_d128_wide, flash_dq_w<128, 32, 2>)
FLASH_DKDV(flash_bwd_dkdv_d64_pipe, flash_dkdv_w<64, 64, 1>)
FLASH_DKDV(flash_bwd_dkdv_d128_pipe, flash_dkdv_w<128, 32, 1>)

// flash_bwd_prep: one warp per row r < rows (= batch·heads·seq; bh = r /
// seq, t = r mod seq) of head width d (a multiple of 8): do16[r] = dO's
// row rounded to bfloat16 (from the rows layout dO, lddo), dsum[r] =
// Σ_c do16[r][c]·o16[r][c] (lanes over c in steps of 32, then a
// butterfly). The statistic D of FlashAttention-2's backward.
extern "C" __global__ void flash_bwd_prep(u16 *do16, float *dsum, const float *dO, u64 lddo, const u16 *o16, u32 heads,
                                          u32 seq, u32 d, u64 rows) {
    const u32 lane = threadIdx.x & 31;
    for (u64 r = thread_index() >> 5; r < rows; r += grid_stride() >> 5) {
        const u32 bh = (u32)(r / seq), t = (u32)(r % seq);
        const float *src = dO + rows_offset(bh, heads, seq, lddo, d) + (u64)t * lddo;
        float s = 0;
        for (u32 col = lane; col < d; col += 32) {
            const u32 b = bf16_rn(src[col]);
            do16[r * d + col] = (u16)b;
            s += bf16_to_f32(b) * bf16_to_f32(o16[r * d + col]);
        }
        for (int w = 16; w > 0; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
        if (lane == 0) dsum[r] = s;
    }
}
