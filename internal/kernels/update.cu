// update.cu: the fused update of a bucket shard, one launch for all its
// segments (see segments.cuh for the chunking): the rule (none, AdamW, SGD)
// then, in the same pass, what the segment's mode asks of the new master:
//
//   MODE_HP       hp[i] = new master as bfloat16 (RNE) or float32
//   MODE_CURRENT  amax[slot] = max(amax[slot], key of new master)
//   MODE_DELAYED  fp8[i] = encode(master*scale[slot]), and the amax as above
//   MODE_BLOCK    1x128 (fp8.CastBlocks1D): per block of 128, amax, scale
//                 by fp8.ScaleFromAmax, cast, float32 scale_inv written to
//                 block_scales[i/128]; MX (fp8.CastMX): per block of 32, the
//                 E8M0 code written to block_scales[i/32], cast with 2^-X or
//                 every byte the NaN code for an Inf/NaN amax
//   MODE_TILE     amax[slot + tile] = max(.., key), tiles of fp8.TileAmax;
//                 only in the _tiles kernels, which the launcher picks for
//                 tables with tile segments (the others are built without
//                 that code); whole rows are taken in bands (segments.cuh)
//
// The arithmetic is optimizer.AdamWElem and optimizer.SGDElem, every
// operation a separately rounded float32 operation in the same order
// (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn; the PTX is built
// with --fmad=false). Amax keys are the bits of |x| (optimizer.AbsBits).
// Elements outside every segment are not touched.
//
// The _q kernels (Q) take the storage of each moment at run time (float32,
// bfloat16, or FP8 with block scales: moments.cuh) and the gradient's type
// as the flag gbf16; the others have both moments and the gradient typed
// by the template.
#include "moments.cuh"

using namespace distopt;

enum Rule { RULE_NONE = 0, RULE_ADAMW = 1, RULE_SGD = 2 };

// Hyper is optimizer.Hyper (the kernels take its fields as eight float
// parameters: the launcher passes each parameter separately).
struct Hyper {
    float gs, b1, b2, omb1, omb2, eps, rbc2, mom;
};

// ld_mom and st_mom read and write moment `which` (0: m, 1: v) of 4
// elements: typed (MT) or, in the _q kernels, through moments.cuh (y: what
// an FP8 moment stores, m or the root of v).
template <bool Q, typename MT>
__device__ __forceinline__ void ld_mom(const MomentSet &ms, int which, u64 i, int cnt, bool vec, float x[4]) {
    if (Q) mom_load(ms, which, i, cnt, vec, x);
    else load((const MT *)(which ? ms.p2 : ms.p1), i, cnt, vec, x);
}
template <bool Q, typename MT>
__device__ __forceinline__ void st_mom(const MomentSet &ms, int which, u64 i, int cnt, bool vec, const float x[4],
                                       const float y[4]) {
    if (Q) mom_store(ms, which, i, cnt, vec, x, y);
    else store((MT *)(which ? ms.p2 : ms.p1), i, cnt, vec, x);
}

// ld_grad reads 4 gradient elements: typed (GT), or by gbf16 (_q kernels).
template <bool Q, typename GT>
__device__ __forceinline__ void ld_grad(const void *grad, bool gbf16, u64 i, int cnt, bool vec, float g[4]) {
    if (Q && gbf16) load((const u16 *)grad, i, cnt, vec, g);
    else if (Q) load((const float *)grad, i, cnt, vec, g);
    else load((const GT *)grad, i, cnt, vec, g);
}

template <int R, typename MT, typename GT, Fp8 F, bool TILES, bool Q>
__device__ void update_kernel(float *__restrict__ master, const MomentSet ms, const void *__restrict__ grad,
                              const Seg *__restrict__ segs, u32 nseg, u64 nchunks, Hyper h, u8 *__restrict__ fp8,
                              void *__restrict__ block_scales, u32 *__restrict__ amax, const float *__restrict__ scale,
                              void *__restrict__ hp, u32 hp_bf16, u32 mx, float fmax, float mfac, u32 pow2, bool gbf16) {
    __shared__ u32 sh[32];
    // the _q kernels' buffers all start 16-byte aligned (the launcher's
    // contract: whole allocations)
    const u64 mal = Q ? 16 : 4 * sizeof(MT), gal = Q ? 16 : 4 * sizeof(GT);
    const bool base_vec = aligned(master, 16) && aligned(ms.p1, mal) && aligned(ms.p2, mal) && aligned(grad, gal) &&
                          aligned(fp8, 4) && aligned(hp, hp_bf16 ? 8 : 16);
    const u32 lane = threadIdx.x & 31;
    for (u64 c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const Seg s = segs[find_seg(segs, nseg, c)];
        const bool tile = TILES && s.mode == MODE_TILE;
        const u64 per_row = tile ? (s.cols + 127) / 128 : 0;
        // The chunk's elements: from rel0 on up to lim, or (band) the
        // BAND_ROWS x 128 elements from rel0 with rows s.cols apart, all in
        // the tile band_tile.
        u64 rel0 = (c - s.chunk0) * CHUNK, lim = s.len;
        bool band = false;
        u32 band_tile = 0;
        if (tile) {
            const BandSplit b = band_split(s);
            const u64 k = c - s.chunk0;
            if (k < b.head_chunks) {
                lim = b.head;
            } else if (k < b.head_chunks + b.band_chunks) {
                const u64 j = k - b.head_chunks, strips = s.cols / 128;
                const u64 bi = j / strips, strip = j - bi * strips;
                const u64 row = (s.param_off + b.head) / s.cols + bi * BAND_ROWS; // of the matrix
                band = true;
                rel0 = b.head + bi * BAND_ROWS * s.cols + strip * 128;
                band_tile = (u32)((row >> 7) * per_row + strip);
            } else {
                rel0 = b.head + b.band_elems + (k - b.head_chunks - b.band_chunks) * CHUNK;
            }
        }
        const bool seg_vec = base_vec && s.off % 4 == 0;
        const float dscale = s.mode == MODE_DELAYED ? scale[s.slot] : 1.0f;
        u32 run = 0; // amax key of the chunk (tensor modes, bands)
#pragma unroll
        for (u32 u = 0; u < UNROLL; u++) {
            const u64 rel = band ? rel0 + (u64)(u * (THREADS / 32) + (threadIdx.x >> 5)) * s.cols + 4 * lane
                                 : rel0 + (u64)u * THREADS * 4 + 4 * threadIdx.x;
            const int cnt = rel < lim ? (int)min(lim - rel, (u64)4) : 0;
            const u64 i = s.off + rel;
            const bool vec = seg_vec && cnt == 4;
            float p[4];
            load(master, i, cnt, vec, p);
            if (R == RULE_ADAMW) {
                float g[4], m[4], v[4], r[4];
                ld_grad<Q, GT>(grad, gbf16, i, cnt, vec, g);
                ld_mom<Q, MT>(ms, 0, i, cnt, vec, m);
                ld_mom<Q, MT>(ms, 1, i, cnt, vec, v);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float gj = __fmul_rn(g[j], h.gs);
                    const float pj = __fmul_rn(p[j], s.decay);
                    m[j] = __fadd_rn(__fmul_rn(h.b1, m[j]), __fmul_rn(h.omb1, gj));
                    v[j] = __fadd_rn(__fmul_rn(h.b2, v[j]), __fmul_rn(h.omb2, __fmul_rn(gj, gj)));
                    r[j] = __fsqrt_rn(v[j]);
                    const float d = __fadd_rn(__fmul_rn(r[j], h.rbc2), h.eps);
                    p[j] = __fsub_rn(pj, __fmul_rn(s.step, __fdiv_rn(m[j], d)));
                }
                store(master, i, cnt, vec, p);
                st_mom<Q, MT>(ms, 0, i, cnt, vec, m, m);
                st_mom<Q, MT>(ms, 1, i, cnt, vec, v, r);
            } else if (R == RULE_SGD) {
                float g[4], b[4];
                ld_grad<Q, GT>(grad, gbf16, i, cnt, vec, g);
                ld_mom<Q, MT>(ms, 0, i, cnt, vec, b);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float gj = __fadd_rn(__fmul_rn(g[j], h.gs), __fmul_rn(s.decay, p[j]));
                    b[j] = __fadd_rn(__fmul_rn(h.mom, b[j]), gj);
                    p[j] = __fsub_rn(p[j], __fmul_rn(s.step, b[j]));
                }
                store(master, i, cnt, vec, p);
                st_mom<Q, MT>(ms, 0, i, cnt, vec, b, b);
            }
            switch (s.mode) {
            case MODE_HP:
                if (hp_bf16) store((u16 *)hp, i, cnt, vec, p);
                else store((float *)hp, i, cnt, vec, p);
                break;
            case MODE_CURRENT:
                run = max(run, keys4(p, cnt));
                break;
            case MODE_DELAYED: {
                run = max(run, keys4(p, cnt));
                float y[4];
#pragma unroll
                for (int j = 0; j < 4; j++) y[j] = __fmul_rn(p[j], dscale);
                cast_store<F>(fp8, i, cnt, vec, y);
                break;
            }
            case MODE_BLOCK: {
                u32 k = keys4(p, cnt);
                float y[4];
                if (mx) { // eight lanes hold one block of 32
                    k = max(k, __shfl_xor_sync(FULL, k, 1));
                    k = max(k, __shfl_xor_sync(FULL, k, 2));
                    k = max(k, __shfl_xor_sync(FULL, k, 4));
                    float mul;
                    const u32 code = mx_scale<F>(k, mul);
                    if (code == 0xffu) {
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            if (j < cnt) fp8[i + j] = (u8)fp8_nan_code;
                    } else {
#pragma unroll
                        for (int j = 0; j < 4; j++) y[j] = __fmul_rn(p[j], mul);
                        cast_store<F>(fp8, i, cnt, vec, y);
                    }
                    if ((lane & 7) == 0 && cnt > 0) ((u8 *)block_scales)[i / 32] = (u8)code;
                } else { // the warp holds one block of 128
                    k = __reduce_max_sync(FULL, k);
                    float sc, inv;
                    scale_from_amax(k, fmax, mfac, pow2 != 0, sc, inv);
#pragma unroll
                    for (int j = 0; j < 4; j++) y[j] = __fmul_rn(p[j], sc);
                    cast_store<F>(fp8, i, cnt, vec, y);
                    if (lane == 0 && cnt > 0) ((float *)block_scales)[i / 128] = inv;
                }
                break;
            }
            case MODE_TILE: // only in the _tiles kernels (the launcher's choice)
                if (!TILES) break;
                if (band) {
                    run = max(run, keys4(p, cnt));
                } else {
                    u32 t[4], k[4];
                    tiles4(s.param_off + rel, s.cols, per_row, t);
#pragma unroll
                    for (int j = 0; j < 4; j++) k[j] = amax_bits(p[j]);
                    fold_tiles(amax + s.slot, t, k, cnt);
                }
                break;
            }
        }
        if (s.mode == MODE_CURRENT || s.mode == MODE_DELAYED) block_fold(amax + s.slot, run, sh);
        else if (band) block_fold(amax + s.slot + band_tile, run, sh);
    }
}

#define UPDATE_PARAMS                                                                                          \
    float *master, void *mom1, void *mom2, const void *grad, const Seg *segs, u32 nseg, u64 nchunks, float gs,  \
        float b1, float b2, float omb1, float omb2, float eps, float rbc2, float mom,                        \
        u8 *fp8, void *block_scales, u32 *amax, const float *scale, void *hp, u32 hp_bf16, u32 mx, float fmax, \
        float mfac, u32 pow2, float *mscales, float *vscales, u32 mtypes, u32 mblock, u32 seed, u64 base
// mtypes: the MomentType of m (bits 0-3) and v (bits 4-7), and bit 8 set
// for a bfloat16 gradient (read by the _q kernels only).
#define UPDATE_ARGS(Q)                                                                                       \
    master, MomentSet{mom1, mom2, mscales, vscales, mtypes & 15u, (mtypes >> 4) & 15u, 31u - __clz(mblock | 1u), seed, base}, grad, \
        segs, nseg, nchunks, Hyper{gs, b1, b2, omb1, omb2, eps, rbc2, mom}, fp8, block_scales, amax, scale, hp,  \
        hp_bf16, mx, fmax, mfac, pow2, (mtypes >> 8) & 1u

// UPDATE defines the kernel NAME and NAME_tiles, the one that also takes
// MODE_TILE segments.
#define UPDATE_Q(NAME, R, MT, GT, F, Q)                                                                           \
    extern "C" __global__ void __launch_bounds__(256) NAME(UPDATE_PARAMS) {                                   \
        update_kernel<R, MT, GT, F, false, Q>(UPDATE_ARGS(Q));                                               \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(256) NAME##_tiles(UPDATE_PARAMS) {                           \
        update_kernel<R, MT, GT, F, true, Q>(UPDATE_ARGS(Q));                                                \
    }
#define UPDATE(NAME, R, MT, GT, F) UPDATE_Q(NAME, R, MT, GT, F, false)

UPDATE(update_none_e4m3, RULE_NONE, float, float, E4M3)
UPDATE(update_none_e5m2, RULE_NONE, float, float, E5M2)
UPDATE(update_adamw_mf32_gf32_e4m3, RULE_ADAMW, float, float, E4M3)
UPDATE(update_adamw_mf32_gf32_e5m2, RULE_ADAMW, float, float, E5M2)
UPDATE(update_adamw_mf32_gbf16_e4m3, RULE_ADAMW, float, u16, E4M3)
UPDATE(update_adamw_mf32_gbf16_e5m2, RULE_ADAMW, float, u16, E5M2)
UPDATE(update_adamw_mbf16_gf32_e4m3, RULE_ADAMW, u16, float, E4M3)
UPDATE(update_adamw_mbf16_gf32_e5m2, RULE_ADAMW, u16, float, E5M2)
UPDATE(update_adamw_mbf16_gbf16_e4m3, RULE_ADAMW, u16, u16, E4M3)
UPDATE(update_adamw_mbf16_gbf16_e5m2, RULE_ADAMW, u16, u16, E5M2)
UPDATE(update_sgd_mf32_gf32_e4m3, RULE_SGD, float, float, E4M3)
UPDATE(update_sgd_mf32_gf32_e5m2, RULE_SGD, float, float, E5M2)
UPDATE(update_sgd_mf32_gbf16_e4m3, RULE_SGD, float, u16, E4M3)
UPDATE(update_sgd_mf32_gbf16_e5m2, RULE_SGD, float, u16, E5M2)
UPDATE(update_sgd_mbf16_gf32_e4m3, RULE_SGD, u16, float, E4M3)
UPDATE(update_sgd_mbf16_gf32_e5m2, RULE_SGD, u16, float, E5M2)
UPDATE(update_sgd_mbf16_gbf16_e4m3, RULE_SGD, u16, u16, E4M3)
UPDATE(update_sgd_mbf16_gbf16_e5m2, RULE_SGD, u16, u16, E5M2)
// Moments of any storage (moments.cuh) and either gradient type.
UPDATE_Q(update_adamw_q_e4m3, RULE_ADAMW, float, float, E4M3, true)
UPDATE_Q(update_adamw_q_e5m2, RULE_ADAMW, float, float, E5M2, true)
UPDATE_Q(update_sgd_q_e4m3, RULE_SGD, float, float, E4M3, true)
UPDATE_Q(update_sgd_q_e5m2, RULE_SGD, float, float, E5M2, true)
