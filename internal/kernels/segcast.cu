// segcast.cu: the cast of the segments of modes MODE_CURRENT and MODE_TILE
// of a shard, one launch for all of them (optimizer.CPU.Cast):
//
//   MODE_CURRENT  fp8[i] = encode(float32(master[i] * scale[slot]))
//   MODE_TILE     fp8[i] = encode(float32(master[i] * scale[slot + tile]))
//
// with the tiles of fp8.CastTiles (128x128, the segment's first element at
// flat index param_off of a matrix of cols columns). The launcher passes
// only segments of those two modes; other bytes are not touched.
#include "segments.cuh"

using namespace distopt;

template <Fp8 F>
__device__ void segcast_kernel(u8 *__restrict__ fp8, const float *__restrict__ master, const Seg *__restrict__ segs,
                               u32 nseg, u64 nchunks, const float *__restrict__ scale) {
    const bool base_vec = aligned(master, 16) && aligned(fp8, 4);
    for (u64 c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const Seg s = segs[find_seg(segs, nseg, c)];
        const u64 rel0 = (c - s.chunk0) * CHUNK;
        const bool seg_vec = base_vec && s.off % 4 == 0;
        const bool tile = s.mode == MODE_TILE;
        const u64 per_row = tile ? (s.cols + 127) / 128 : 0;
        const float sc = tile ? 1.0f : scale[s.slot];
#pragma unroll
        for (u32 u = 0; u < UNROLL; u++) {
            const u64 rel = rel0 + (u64)u * THREADS * 4 + 4 * threadIdx.x;
            const int cnt = rel < s.len ? (int)min(s.len - rel, (u64)4) : 0;
            if (cnt == 0) continue;
            const u64 i = s.off + rel;
            const bool vec = seg_vec && cnt == 4;
            float p[4], y[4];
            load(master, i, cnt, vec, p);
            if (tile) {
                u32 t[4];
                tiles4(s.param_off + rel, s.cols, per_row, t);
                if (cnt == 4 && t[0] == t[3] && t[1] == t[0] && t[2] == t[0]) { // one tile: one scale
                    const float st = scale[s.slot + t[0]];
#pragma unroll
                    for (int j = 0; j < 4; j++) y[j] = __fmul_rn(p[j], st);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; j++) y[j] = j < cnt ? __fmul_rn(p[j], scale[s.slot + t[j]]) : 0.0f;
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) y[j] = __fmul_rn(p[j], sc);
            }
            cast_store<F>(fp8, i, cnt, vec, y);
        }
    }
}

extern "C" {
__global__ void __launch_bounds__(256) segcast_e4m3(u8 *fp8, const float *master, const Seg *segs, u32 nseg, u64 nchunks,
                                                    const float *scale) {
    segcast_kernel<E4M3>(fp8, master, segs, nseg, nchunks, scale);
}
__global__ void __launch_bounds__(256) segcast_e5m2(u8 *fp8, const float *master, const Seg *segs, u32 nseg, u64 nchunks,
                                                    const float *scale) {
    segcast_kernel<E5M2>(fp8, master, segs, nseg, nchunks, scale);
}
}
