// segcast.cu: the cast of the segments of modes MODE_CURRENT and MODE_TILE
// of a shard, or of several (ShardBufs), one launch for all of them
// (optimizer.CPU.Cast):
//
//   MODE_CURRENT  fp8[i] = encode(float32(master[i] * scale[slot]))
//   MODE_TILE     fp8[i] = encode(float32(master[i] * scale[slot + tile]))
//
// with the tiles of fp8.CastTiles (128x128, the segment's first element at
// flat index param_off of a matrix of cols columns). The launcher passes
// only segments of those two modes; other bytes are not touched. Chunks
// past a segment's end (a tile segment's table counts the chunks of
// update.cu's bands, a few more) do nothing.
#include "segments.cuh"
#include "stepctl.cuh"

using namespace distopt;

// cast_chunk casts the elements of chunk rel0 of segment s (MODE_TILE when
// TILE, else MODE_CURRENT with scale sc). A full chunk of a vector-aligned
// segment issues the loads of all its passes before the first store; other
// chunks mask the elements past the segment's end. For tiles, the position
// of each warp's first element (WarpPos) is divided once per chunk and moved
// forward pass by pass, and the scales of all passes are read before the
// first is used: one per lane and pass when the pass's 128 elements lie in
// one row (in_row), else one per element.
template <Fp8 F, bool TILE>
__device__ __forceinline__ void cast_chunk(u8 *__restrict__ fp8, const float *__restrict__ master, const Seg &s,
                                           u64 rel0, bool seg_vec, const float *__restrict__ scale, float sc) {
    const u64 base = rel0 + 4 * threadIdx.x; // rel of this thread's first element of pass 0
    const bool full = seg_vec && rel0 + CHUNK <= s.len;
    float p[UNROLL][4];
    if (full) {
#pragma unroll
        for (u32 u = 0; u < UNROLL; u++) ld4(master, s.off + base + (u64)u * THREADS * 4, p[u]);
    } else {
#pragma unroll
        for (u32 u = 0; u < UNROLL; u++) {
            const u64 rel = base + (u64)u * THREADS * 4;
            const int cnt = rel < s.len ? (int)min(s.len - rel, (u64)4) : 0;
            load(master, s.off + rel, cnt, seg_vec && cnt == 4, p[u]);
        }
    }
    float st[UNROLL]; // TILE: the scale of each in_row pass
    bool row[UNROLL];
    const u64 per_row = TILE ? (s.cols + 127) / 128 : 0;
    if (TILE) {
        const bool wp = warp_pos_ok(s.param_off, s.len, s.cols);
        WarpPos q{0, 0};
        if (wp) q = warp_pos(s.param_off + rel0 + 128 * (threadIdx.x >> 5), (u32)s.cols);
#pragma unroll
        for (u32 u = 0; u < UNROLL; u++) {
            row[u] = wp && in_row(q, (u32)s.cols);
            st[u] = row[u] && base + (u64)u * THREADS * 4 < s.len
                        ? scale[s.slot + lane_tile(q, (u32)per_row, threadIdx.x & 31)]
                        : 1.0f;
            if (wp) next_pass(q, (u32)s.cols);
        }
    }
#pragma unroll
    for (u32 u = 0; u < UNROLL; u++) {
        const u64 rel = base + (u64)u * THREADS * 4;
        const int cnt = full ? 4 : rel < s.len ? (int)min(s.len - rel, (u64)4) : 0;
        if (cnt == 0) break; // and so for every later pass
        float y[4];
        if (TILE && !row[u]) {
            u32 t[4];
            tiles4(s.param_off + rel, s.cols, per_row, t);
#pragma unroll
            for (int j = 0; j < 4; j++) y[j] = j < cnt ? __fmul_rn(p[u][j], scale[s.slot + t[j]]) : 0.0f;
        } else {
            const float m = TILE ? st[u] : sc;
#pragma unroll
            for (int j = 0; j < 4; j++) y[j] = __fmul_rn(p[u][j], m);
        }
        cast_store<F>(fp8, s.off + rel, cnt, seg_vec && cnt == 4, y);
    }
}

// segcast_kernel casts every chunk; in a launch over several shards
// (shards not null) a chunk takes the master and fp8 of its segment's
// shard instead of the launch's.
template <Fp8 F>
__device__ void segcast_kernel(u8 *__restrict__ fp8_l, const float *__restrict__ master_l,
                               const Seg *__restrict__ segs, u32 nseg, u64 nchunks, const float *__restrict__ scale,
                               const ShardBufs *__restrict__ shards) {
    for (u64 c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const Seg s = segs[find_seg(segs, nseg, c)];
        u8 *__restrict__ fp8 = fp8_l;
        const float *__restrict__ master = master_l;
        if (shards != nullptr) fp8 = (u8 *)shards[s.shard].out, master = (const float *)shards[s.shard].master;
        const bool base_vec = aligned(master, 16) && aligned(fp8, 4);
        const u64 rel0 = (c - s.chunk0) * CHUNK;
        const bool seg_vec = base_vec && s.off % 4 == 0;
        if (s.mode == MODE_TILE) cast_chunk<F, true>(fp8, master, s, rel0, seg_vec, scale, 1.0f);
        else cast_chunk<F, false>(fp8, master, s, rel0, seg_vec, scale, scale[s.slot]);
    }
}

extern "C" {
__global__ void __launch_bounds__(256) segcast_e4m3(u8 *fp8, const float *master, const Seg *segs, u32 nseg, u64 nchunks,
                                                    const float *scale, const StepCtl *ctl, const ShardBufs *shards) {
    if (ctl_skip(ctl)) return;
    segcast_kernel<E4M3>(fp8, master, segs, nseg, nchunks, scale, shards);
}
__global__ void __launch_bounds__(256) segcast_e5m2(u8 *fp8, const float *master, const Seg *segs, u32 nseg, u64 nchunks,
                                                    const float *scale, const StepCtl *ctl, const ShardBufs *shards) {
    if (ctl_skip(ctl)) return;
    segcast_kernel<E5M2>(fp8, master, segs, nseg, nchunks, scale, shards);
}
}
