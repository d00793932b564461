// update.cu: the fused update of a bucket shard (or of several: ShardBufs),
// one launch for all their segments (see segments.cuh for the chunking): the rule (none, AdamW, SGD)
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
// The _q kernels (Q) take the storage of each moment (float32, bfloat16,
// or FP8 with block scales: moments.cuh) at run time, or fixed at compile
// time (_q_fp8_fp8, _q_fp8_bf16, _q_fp8), and the gradient's type as the
// flag gbf16; the others have both moments and the gradient typed by the
// template.
#include "moments.cuh"
#include "stepctl.cuh"

using namespace distopt;

enum Rule { RULE_NONE = 0, RULE_ADAMW = 1, RULE_SGD = 2 };

// Hyper is optimizer.Hyper (the kernels take its fields as eight float
// parameters: the launcher passes each parameter separately).
struct Hyper {
    float gs, b1, b2, omb1, omb2, eps, rbc2, mom;
};

// In is what phase one of a pass reads (update_kernel): the master, and
// the gradient and the moments as the words of their storage.
struct In {
    u32 p[4];
    Words g, m, v;
};

// fetch reads the operands of rule R for the cnt elements at i into in:
// typed (MT, GT), or in the _q kernels the moments through moments.cuh and
// the gradient by gbf16; one vector access each when VEC.
template <int R, typename MT, typename GT, bool Q, bool VEC>
__device__ __forceinline__ void fetch(const float *master, const MomentSet &ms, const void *grad, bool gbf16, u64 i,
                                      int cnt, In &in) {
    ld_words<4, VEC>(master, i, cnt, in.p);
    if (R == RULE_NONE) return;
    if (Q && gbf16) ld_words<2, VEC>(grad, i, cnt, in.g.w);
    else if (Q) ld_words<4, VEC>(grad, i, cnt, in.g.w);
    else ld_words<sizeof(GT), VEC>(grad, i, cnt, in.g.w);
#pragma unroll
    for (int which = 0; which < (R == RULE_ADAMW ? 2 : 1); which++) {
        Words &w = which ? in.v : in.m;
        if (Q) mom_fetch<VEC>(ms, which, i, cnt, w);
        else ld_words<sizeof(MT), VEC>(which ? ms.p2 : ms.p1, i, cnt, w.w);
    }
}

// widen_grad and widen_mom turn what fetch read into float32.
template <bool Q, typename GT> __device__ __forceinline__ void widen_grad(const Words &w, bool gbf16, float g[4]) {
    if (Q && gbf16) widen<2>(w.w, g);
    else if (Q) widen<4>(w.w, g);
    else widen<sizeof(GT)>(w.w, g);
}
template <bool Q, typename MT>
__device__ __forceinline__ void widen_mom(const MomentSet &ms, int which, const Words &w, float x[4]) {
    if (Q) mom_widen(ms, which, w, x);
    else widen<sizeof(MT)>(w.w, x);
}

// st_mom writes moment `which` (0: m, 1: v) of 4 elements: typed (MT) or,
// in the _q kernels, through moments.cuh (y: what an FP8 moment stores, m
// or the root of v).
template <bool Q, typename MT>
__device__ __forceinline__ void st_mom(const MomentSet &ms, int which, u64 i, int cnt, bool vec, const float x[4],
                                       const float y[4], u64 si, u64 ph) {
    if (Q) mom_store(ms, which, i, cnt, vec, x, y, si, ph);
    else store((MT *)(which ? ms.p2 : ms.p1), i, cnt, vec, x);
}

// GROUP is the number of passes whose loads update_kernel issues together
// in the typed kernels and the _q kernels of fixed moment types; the _q
// kernels of any types take one pass at a time (their words of every
// storage type would cost registers: occupancy).
#ifndef UPDATE_GROUP
#define UPDATE_GROUP 2
#endif
static const u32 GROUP = UPDATE_GROUP;

// The _q kernels of fixed moment types take UPDATE_QFIXED_GROUP passes at a
// time and unroll UPDATE_QFIXED_OUTER of their groups (the others every
// group): their arithmetic makes them bound by instruction issue, and a
// smaller loop body stays in the instruction cache.
#ifndef UPDATE_QFIXED_GROUP
#define UPDATE_QFIXED_GROUP GROUP
#endif
#ifndef UPDATE_QFIXED_OUTER
#define UPDATE_QFIXED_OUTER UNROLL
#endif
// FP8 m and v (and SGD's FP8 momentum: the same MK) take
// UPDATE_QFIXED_GROUP_FP8V passes at a time, unstaged (UPDATE_ASYNC_FP8V
// 0), at UPDATE_MINB_QFIXED_FP8V blocks per SM: measured on an H200 (tenth
// session, 2^28 elements), all four passes' loads in registers at three
// blocks per SM took 1.20 ms where staging took 1.45 and two passes at four
// blocks 1.29; FP8 m with bfloat16 v is fastest staged (UPDATE_ASYNC: 1.14
// ms, against 1.15 and 1.27). SGD's FP8 momentum on that schedule took
// 0.88 ms (93% of copy; eleventh session): no other schedule was more than
// 1% faster.
#ifndef UPDATE_QFIXED_GROUP_FP8V
#define UPDATE_QFIXED_GROUP_FP8V 4
#endif
#ifndef UPDATE_MINB_QFIXED_FP8V
#define UPDATE_MINB_QFIXED_FP8V 3
#endif
#ifndef UPDATE_ASYNC_FP8V
#define UPDATE_ASYNC_FP8V 0
#endif
// The moment types of the _q kernels (MK): any (read at run time), or fixed.
static const int ANY = -1, FP8_FP8 = MOM_FP8 | MOM_FP8 << 4, FP8_BF16 = MOM_FP8 | MOM_BF16 << 4;

// Staging (AS: update_passes of whole chunks in the _q kernel of FP8 m with
// bfloat16 v, UPDATE_ASYNC, and of FP8 m and v, UPDATE_ASYNC_FP8V, with
// bfloat16 gradients). Those kernels are bound by
// instruction issue and memory latency together: with the loads of two
// passes in registers (GROUP), a warp has nothing in flight while it
// computes. Staged, a thread copies everything its chunk's passes read
// into shared memory at the start (cp.async, no registers held), one
// commit group per pass, and each pass waits only for its own group: the
// later passes' loads are in flight while the earlier ones compute. Each
// thread reads back only its own words (the FP8 moments' block scales too:
// every lane copies its block's). Sizes: 16 + 8 + 4 + 8 + 4 + 4 bytes per
// thread and pass: 44 KiB per block of 256 threads (four blocks per SM:
// 176 KiB of shared memory).
#ifndef UPDATE_ASYNC
#define UPDATE_ASYNC 1
#endif
struct Stage {
    uint4 p[UNROLL][THREADS];      // master
    uint2 g[UNROLL][THREADS];      // bfloat16 gradient
    u32 m[UNROLL][THREADS];        // FP8 m codes
    uint2 v[UNROLL][THREADS];      // FP8 v codes (x) or bfloat16 v
    float sm[UNROLL][THREADS];     // the block scale of m of the thread's elements
    float sv[UNROLL][THREADS];     // and of v
};

// cp_async copies N bytes (4, 8 or 16) from global p to shared d.
template <int N> __device__ __forceinline__ void cp_async(void *d, const void *p) {
    const u32 sa = (u32)__cvta_generic_to_shared(d);
    if (N == 16)
        asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %1; cp.async.cg.shared.global [%0], [g], 16; }" ::"r"(sa), "l"(p)
                     : "memory");
    else
        asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %1; cp.async.ca.shared.global [%0], [g], %2; }" ::"r"(sa), "l"(p),
                     "n"(N)
                     : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// cp_wait waits until at most n of the thread's commit groups are pending
// (n a constant once the passes are unrolled).
__device__ __forceinline__ void cp_wait(u32 n) {
    if (n == 0) asm volatile("cp.async.wait_group 0;" ::: "memory");
    else if (n == 1) asm volatile("cp.async.wait_group 1;" ::: "memory");
    else if (n == 2) asm volatile("cp.async.wait_group 2;" ::: "memory");
    else asm volatile("cp.async.wait_group 3;" ::: "memory");
}

// Chunk is what the passes over one chunk read (update_kernel fills it per
// chunk): the chunk's segment and buffers, pass u's elements (rel_b +
// u * rel_u on, up to lim; band: rows of the tile), and the launch's
// scalars.
struct Chunk {
    Seg s;
    MomentSet ms;
    float *master;
    const void *grad;
    u8 *fp8;
    void *block_scales, *hp;
    u32 *amax;
    Hyper h;
    u64 rel_b, rel_u, lim, per_row;
    float dscale, fmax, mfac;
    u32 hp_bf16, mx, pow2, lane;
    bool gbf16, vec, band;
};

// kept returns x through an identity permute of its bytes, which ptxas
// cannot fold back into a kernel parameter: the kernels' parameters live in
// the constant bank, and on sm_90 ptxas reloads such an operand (ULDC) after
// every slow path of a division or square root, several times per element;
// the kept copies of the launch's scalars and buffers stay in uniform
// registers for the whole chunk (fewer instructions, same values). Below
// sm_90 arithmetic takes constant-bank operands directly: x itself.
__device__ __forceinline__ u32 kept(u32 x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("prmt.b32 %0, %0, 0, 0x3210;" : "+r"(x));
#endif
    return x;
}
__device__ __forceinline__ float kept(float x) { return __uint_as_float(kept(__float_as_uint(x))); }
__device__ __forceinline__ u64 kept(u64 x) { return (u64)kept((u32)(x >> 32)) << 32 | kept((u32)x); }
template <typename T> __device__ __forceinline__ T *kept(T *p) { return (T *)kept((u64)p); }
__device__ __forceinline__ Hyper kept(Hyper h) {
    h.gs = kept(h.gs), h.b1 = kept(h.b1), h.b2 = kept(h.b2), h.omb1 = kept(h.omb1), h.omb2 = kept(h.omb2);
    h.eps = kept(h.eps), h.rbc2 = kept(h.rbc2), h.mom = kept(h.mom);
    return h;
}

// update_passes runs the passes of one chunk and returns the largest amax
// key of its new masters (the tensor modes and bands fold it). WHOLE: the
// chunk's every pass holds 4 elements of one segment that is not a tile
// segment, with vector accesses (Chunk.vec): then no pass computes its
// count or picks between the vector and the element-by-element access,
// and every pass's offset from the first is a constant, which the
// instruction-bound _q kernels of FP8 moments need (whole chunks are all
// but the last chunk of each segment). The _tiles kernels have no WHOLE
// path: with both, ptxas spills at their 80 registers.
// Each thread issues the loads of G passes together, before the
// arithmetic and stores of the first (the compiler cannot move a load
// above a store that may alias it); AS (staged, whole chunks only): the
// loads of all the chunk's passes into shared memory first, then one pass
// at a time (Stage).
template <int R, typename MT, typename GT, Fp8 F, bool TILES, bool Q, u32 G0, u32 OU, bool WHOLE, bool AS>
__device__ __forceinline__ u32 update_passes(const Chunk &k) {
    const u32 G = AS ? 1 : G0; // staged: one pass at a time
    const Seg &s = k.s;
    MomentSet ms = k.ms;
    ms.p1 = kept(ms.p1), ms.p2 = kept(ms.p2), ms.s1 = kept(ms.s1), ms.s2 = kept(ms.s2);
    ms.seed = kept(ms.seed), ms.base = kept(ms.base);
    float *__restrict__ master = kept(k.master);
    const void *__restrict__ grad = kept(k.grad);
    u8 *__restrict__ fp8 = kept(k.fp8);
    void *__restrict__ block_scales = kept(k.block_scales);
    void *__restrict__ hp = k.hp;
    u32 *__restrict__ amax = k.amax;
    const Hyper h = kept(k.h);
    const u32 lane = k.lane;
    const bool gbf16 = k.gbf16, band = !WHOLE && k.band;
    const u64 rel_u = WHOLE ? (u64)THREADS * 4 : k.rel_u;
    u32 run = 0; // amax key of the chunk (tensor modes, bands)
    // pass u's elements: rel_of(u) on, cnt_of of them
#define rel_of(u) (k.rel_b + (u64)(u) * rel_u)
#define cnt_of(rel) (WHOLE ? 4 : (rel) < k.lim ? (int)min(k.lim - (rel), (u64)4) : 0)
    // Whole chunks: the indices of a pass's block scales (moments: i >>
    // ms.shift; 1x128: i / 128; MX: i / 32) and its bucket position over 2
    // are the first pass's plus a multiple of the pass, a pass being a
    // whole number of blocks (no 64-bit shifts per pass).
    const u64 i0 = s.off + k.rel_b;
    const u64 msi0 = i0 >> ms.shift, ph0 = (ms.base + i0) >> 1;
    const u32 mstep = (THREADS * 4) >> ms.shift;
#define msi_of(u, i) (WHOLE ? msi0 + (u64)(u) * mstep : (i) >> ms.shift)
#define ph_of(u, i) (WHOLE ? ph0 + (u64)(u) * (THREADS * 2) : (ms.base + (i)) >> 1)
#define bsi_of(u, i, b) (WHOLE ? i0 / (b) + (u64)(u) * (THREADS * 4 / (b)) : (i) / (b))
    __shared__ Stage st; // only the AS instances use it
    const u32 t = threadIdx.x;
    if (AS) {
        // the passes' scale indices: the first's plus a multiple of the
        // pass (a pass is a whole number of moment blocks)
        const float *s1 = ms.s1 + msi0, *s2 = ms.s2 + msi0;
#pragma unroll
        for (u32 u = 0; u < UNROLL; u++) {
            const u64 i = s.off + rel_of(u);
            cp_async<16>(&st.p[u][t], master + i);
            cp_async<8>(&st.g[u][t], (const u16 *)grad + i);
            cp_async<4>(&st.m[u][t], (const u8 *)ms.p1 + i);
            cp_async<4>(&st.sm[u][t], s1 + u * mstep);
            if (R == RULE_ADAMW && ms.t2 == MOM_FP8) {
                cp_async<4>(&st.v[u][t], (const u8 *)ms.p2 + i);
                cp_async<4>(&st.sv[u][t], s2 + u * mstep);
            } else if (R == RULE_ADAMW) {
                cp_async<8>(&st.v[u][t], (const u16 *)ms.p2 + i);
            }
            cp_commit();
        }
    }
#pragma unroll OU
    for (u32 u0 = 0; u0 < UNROLL; u0 += G) {
        In in[G];
#pragma unroll
        for (u32 q = 0; q < G; q++) { // phase one: every load of the group
            const u64 rel = rel_of(u0 + q);
            const int cnt = cnt_of(rel);
            if (AS) { // the pass's staged words
                const u32 u = u0 + q;
                cp_wait(UNROLL - 1 - u);
                const uint4 x = st.p[u][t];
                in[q].p[0] = x.x, in[q].p[1] = x.y, in[q].p[2] = x.z, in[q].p[3] = x.w;
                const uint2 y = st.g[u][t];
                in[q].g.w[0] = y.x, in[q].g.w[1] = y.y, in[q].g.w[2] = 0, in[q].g.w[3] = 0;
                in[q].m.w[0] = st.m[u][t], in[q].m.w[1] = in[q].m.w[2] = in[q].m.w[3] = 0;
                in[q].m.inv = st.sm[u][t];
                if (R == RULE_ADAMW) {
                    const uint2 z = st.v[u][t];
                    in[q].v.w[0] = z.x, in[q].v.w[1] = ms.t2 == MOM_FP8 ? 0 : z.y, in[q].v.w[2] = in[q].v.w[3] = 0;
                    in[q].v.inv = ms.t2 == MOM_FP8 ? st.sv[u][t] : 1.0f;
                }
            } else if (WHOLE || (k.vec && cnt == 4)) {
                fetch<R, MT, GT, Q, true>(master, ms, grad, gbf16, s.off + rel, cnt, in[q]);
            } else {
                fetch<R, MT, GT, Q, false>(master, ms, grad, gbf16, s.off + rel, cnt, in[q]);
            }
        }
#pragma unroll
        for (u32 q = 0; q < G; q++) { // phase two: arithmetic and stores
            const u64 rel = rel_of(u0 + q);
            const int cnt = cnt_of(rel);
            const u64 i = s.off + rel;
            const bool vec = WHOLE || (k.vec && cnt == 4);
            float p[4];
            widen<4>(in[q].p, p);
            if (R == RULE_ADAMW) {
                float g[4], m[4], v[4], r[4];
                widen_grad<Q, GT>(in[q].g, AS || gbf16, g);
                widen_mom<Q, MT>(ms, 0, in[q].m, m);
                widen_mom<Q, MT>(ms, 1, in[q].v, v);
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
                st_mom<Q, MT>(ms, 0, i, cnt, vec, m, m, msi_of(u0 + q, i), 0);
                st_mom<Q, MT>(ms, 1, i, cnt, vec, v, r, msi_of(u0 + q, i), ph_of(u0 + q, i));
            } else if (R == RULE_SGD) {
                float g[4], b[4];
                widen_grad<Q, GT>(in[q].g, AS || gbf16, g);
                widen_mom<Q, MT>(ms, 0, in[q].m, b);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float gj = __fadd_rn(__fmul_rn(g[j], h.gs), __fmul_rn(s.decay, p[j]));
                    b[j] = __fadd_rn(__fmul_rn(h.mom, b[j]), gj);
                    p[j] = __fsub_rn(p[j], __fmul_rn(s.step, b[j]));
                }
                store(master, i, cnt, vec, p);
                st_mom<Q, MT>(ms, 0, i, cnt, vec, b, b, msi_of(u0 + q, i), 0);
            }
            switch (s.mode) {
            case MODE_HP:
                if (k.hp_bf16) store((u16 *)hp, i, cnt, vec, p);
                else store((float *)hp, i, cnt, vec, p);
                break;
            case MODE_CURRENT:
                run = max(run, keys4(p, cnt));
                break;
            case MODE_DELAYED: {
                run = max(run, keys4(p, cnt));
                float y[4];
#pragma unroll
                for (int j = 0; j < 4; j++) y[j] = __fmul_rn(p[j], k.dscale);
                cast_store<F>(fp8, i, cnt, vec, y);
                break;
            }
            case MODE_BLOCK: {
                u32 key = keys4(p, cnt);
                float y[4];
                if (k.mx) { // eight lanes hold one block of 32
                    key = max(key, __shfl_xor_sync(FULL, key, 1));
                    key = max(key, __shfl_xor_sync(FULL, key, 2));
                    key = max(key, __shfl_xor_sync(FULL, key, 4));
                    float mul;
                    const u32 code = mx_scale<F>(key, mul);
                    if (code == 0xffu) {
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            if (j < cnt) fp8[i + j] = (u8)fp8_nan_code;
                    } else {
#pragma unroll
                        for (int j = 0; j < 4; j++) y[j] = __fmul_rn(p[j], mul);
                        cast_store<F>(fp8, i, cnt, vec, y);
                    }
                    if ((lane & 7) == 0 && cnt > 0) ((u8 *)block_scales)[bsi_of(u0 + q, i, 32)] = (u8)code;
                } else { // the warp holds one block of 128
                    key = __reduce_max_sync(FULL, key);
                    float sc, inv;
                    scale_from_amax(key, k.fmax, k.mfac, k.pow2 != 0, sc, inv);
#pragma unroll
                    for (int j = 0; j < 4; j++) y[j] = __fmul_rn(p[j], sc);
                    cast_store<F>(fp8, i, cnt, vec, y);
                    if (lane == 0 && cnt > 0) ((float *)block_scales)[bsi_of(u0 + q, i, 128)] = inv;
                }
                break;
            }
            case MODE_TILE: // only in the _tiles kernels (the launcher's choice), never whole
                if (!TILES || WHOLE) break;
                if (band) {
                    run = max(run, keys4(p, cnt));
                } else {
                    u32 t[4], key[4];
                    tiles4(s.param_off + rel, s.cols, k.per_row, t);
#pragma unroll
                    for (int j = 0; j < 4; j++) key[j] = amax_bits(p[j]);
                    fold_tiles(amax + s.slot, t, key, cnt);
                }
                break;
            }
        }
    }
#undef rel_of
#undef cnt_of
#undef msi_of
#undef ph_of
#undef bsi_of
    return run;
}

// update_kernel is the body of every update kernel. In the _q kernels,
// MK >= 0 fixes the moment types (m in bits 0-3, v in bits 4-7) at compile
// time, the launch's being those (the launcher's choice of kernel); MK < 0
// takes them from ms.
template <int R, typename MT, typename GT, Fp8 F, bool TILES, bool Q, int MK, u32 G, u32 OU>
__device__ __forceinline__ void update_kernel(float *__restrict__ master_l, const MomentSet ms_in,
                                              const void *__restrict__ grad_l, const Seg *__restrict__ segs, u32 nseg,
                                              u64 nchunks, Hyper h, u8 *__restrict__ fp8_l,
                                              void *__restrict__ block_scales_l, u32 *__restrict__ amax,
                                              const float *__restrict__ scale, void *__restrict__ hp_l, u32 hp_bf16,
                                              u32 mx, float fmax, float mfac, u32 pow2, bool gbf16,
                                              const ShardBufs *__restrict__ shards) {
    __shared__ u32 sh[32];
#ifdef UPDATE_PROBE
    shards = nullptr; // one shard (below)
#endif
    for (u64 c = blockIdx.x; c < nchunks; c += gridDim.x) {
        Chunk k;
        k.s = segs[find_seg_warp(segs, nseg, c)];
        const Seg &s = k.s;
        // the buffers: the launch's, or (several shards) the segment's shard's
        k.ms = ms_in;
        MomentSet &ms = k.ms;
        if (MK >= 0) ms.t1 = (u32)MK & 15u, ms.t2 = (u32)MK >> 4;
        k.master = master_l, k.grad = grad_l, k.fp8 = fp8_l, k.block_scales = block_scales_l, k.hp = hp_l;
        if (shards != nullptr) {
            const ShardBufs &b = shards[s.shard];
            k.master = (float *)b.master, k.grad = b.grad, k.fp8 = (u8 *)b.out, k.block_scales = b.block_scales;
            k.hp = b.out;
            ms.p1 = b.m, ms.p2 = b.v, ms.s1 = b.mscales, ms.s2 = b.vscales, ms.base = b.base, ms.seed = b.seed;
        }
        k.amax = amax, k.h = h, k.hp_bf16 = hp_bf16, k.mx = mx, k.fmax = fmax, k.mfac = mfac, k.pow2 = pow2;
        k.gbf16 = gbf16, k.lane = threadIdx.x & 31;
        // Vector accesses need the alignment of one vector of 4 elements:
        // 16 bytes of float32, 8 of bfloat16, 4 of FP8 codes (a _q kernel's
        // moments by their storage), checked for what the segment's mode
        // writes: a shard's one output buffer is its FP8 bytes or its
        // copy's elements.
        const u64 gal = Q ? (gbf16 ? 8 : 16) : 4 * sizeof(GT);
        const bool out_vec = s.mode == MODE_HP ? aligned(k.hp, hp_bf16 ? 8 : 16)
                             : s.mode == MODE_DELAYED || s.mode == MODE_BLOCK ? aligned(k.fp8, 4)
                                                                              : true;
        const bool base_vec = aligned(k.master, 16) &&
                              (R == RULE_NONE || aligned(ms.p1, Q ? mom_align(ms.t1) : 4 * sizeof(MT))) &&
                              (R != RULE_ADAMW || aligned(ms.p2, Q ? mom_align(ms.t2) : 4 * sizeof(MT))) &&
                              (R == RULE_NONE || aligned(k.grad, gal)) && out_vec;
        const bool tile = TILES && s.mode == MODE_TILE;
        k.per_row = tile ? (s.cols + 127) / 128 : 0;
        // The chunk's elements: from rel0 on up to lim, or (band) the
        // BAND_ROWS x 128 elements from rel0 with rows s.cols apart, all in
        // the tile band_tile.
        u64 rel0 = (c - s.chunk0) * CHUNK;
        k.lim = s.len;
        k.band = false;
        u32 band_tile = 0;
        if (tile) {
            const BandSplit b = band_split(s);
            const u64 j0 = c - s.chunk0;
            if (j0 < b.head_chunks) {
                k.lim = b.head;
            } else if (j0 < b.head_chunks + b.band_chunks) {
                const u64 j = j0 - b.head_chunks, strips = s.cols / 128;
                const u64 bi = j / strips, strip = j - bi * strips;
                const u64 row = (s.param_off + b.head) / s.cols + bi * BAND_ROWS; // of the matrix
                k.band = true;
                rel0 = b.head + bi * BAND_ROWS * s.cols + strip * 128;
                band_tile = (u32)((row >> 7) * k.per_row + strip);
            } else {
                rel0 = b.head + b.band_elems + (j0 - b.head_chunks - b.band_chunks) * CHUNK;
            }
        }
        k.vec = base_vec && s.off % 4 == 0;
        k.dscale = s.mode == MODE_DELAYED ? scale[s.slot] : 1.0f;
        k.rel_b = k.band ? rel0 + (u64)(threadIdx.x >> 5) * s.cols + 4 * k.lane : rel0 + 4 * threadIdx.x;
        k.rel_u = k.band ? (u64)(THREADS / 32) * s.cols : (u64)THREADS * 4;
        bool whole = !TILES && k.vec && !tile && rel0 + CHUNK <= k.lim;
#ifdef UPDATE_PROBE
        // Static analysis only (scripts/gpu/updsass.sh), never launched: the
        // case of distopt-bench-update -tables moments as constants (one
        // shard, Block1x128 segments, bfloat16 gradients, FP8 moment blocks
        // of 128, whole chunks), so that the chunk loop's SASS is the path
        // that case executes.
        k.s.mode = MODE_BLOCK, k.mx = 0, k.gbf16 = true, ms.shift = 7, whole = true;
#endif
        // staged (AS): whole chunks of the kernels of fixed moment types
        // (an FP8 m) with bfloat16 gradients
        const bool AS = Q && (MK == FP8_BF16 ? UPDATE_ASYNC : MK == FP8_FP8 ? UPDATE_ASYNC_FP8V : 0);
        const u32 run = whole && AS && k.gbf16 ? update_passes<R, MT, GT, F, TILES, Q, G, OU, true, AS>(k)
                        : whole                ? update_passes<R, MT, GT, F, TILES, Q, G, OU, true, false>(k)
                                               : update_passes<R, MT, GT, F, TILES, Q, G, OU, false, false>(k);
        if (s.mode == MODE_CURRENT || s.mode == MODE_DELAYED) block_fold(amax + s.slot, run, sh);
        else if (k.band) block_fold(amax + s.slot + band_tile, run, sh);
    }
}

#define UPDATE_PARAMS                                                                                          \
    float *master, void *mom1, void *mom2, const void *grad, const Seg *segs, u32 nseg, u64 nchunks, float gs,  \
        float b1, float b2, float omb1, float omb2, float eps, float rbc2, float mom,                        \
        u8 *fp8, void *block_scales, u32 *amax, const float *scale, void *hp, u32 hp_bf16, u32 mx, float fmax, \
        float mfac, u32 pow2, float *mscales, float *vscales, u32 mtypes, u32 mblock, u32 seed, u64 base,     \
        const StepCtl *ctl, const ShardBufs *shards
// mtypes: the MomentType of m (bits 0-3) and v (bits 4-7), and bit 8 set
// for a bfloat16 gradient (read by the _q kernels only). ctl: the step
// control block (stepctl.cuh), or null: when set, its gradient scale
// replaces gs, and a skipped step returns before writing anything. shards:
// null, or the buffers of each shard of a launch over several (segments.cuh's
// ShardBufs; the launch's own master ... base are then not read).
#define UPDATE_ARGS                                                                                          \
    master, MomentSet{mom1, mom2, mscales, vscales, mtypes & 15u, (mtypes >> 4) & 15u, 31u - __clz(mblock | 1u), seed, base}, grad, \
        segs, nseg, nchunks, Hyper{gs, b1, b2, omb1, omb2, eps, rbc2, mom}, fp8, block_scales, amax, scale, hp,  \
        hp_bf16, mx, fmax, mfac, pow2, (mtypes >> 8) & 1u, shards

// The _q kernels: moments of any storage (moments.cuh), read at run time
// from mtypes (MK -1, one pass at a time: the words of every storage type
// would cost registers), and, each a kernel of its own so that it has the
// registers (and occupancy) it needs alone, the bodies of fixed moment
// types the launcher picks for those types (their mtypes' moment bits are
// not read): FP8 m and v (SGD: FP8 momentum), FP8 m and bfloat16 v.
// (ANY, FP8_FP8 and FP8_BF16 are defined above, with the fixed kernels' schedules.)

// Blocks of 256 threads per SM the kernels are built for (registers per
// thread: 64 for 4, 80 for 3): bfloat16 moments and the _q kernels of
// fixed types fit 4 with two passes in flight; float32 moments, the _q
// kernels of any types and every _tiles kernel 3 (at 4 they spill).
#ifndef UPDATE_MINB_BF16
#define UPDATE_MINB_BF16 4
#endif
#ifndef UPDATE_MINB_F32
#define UPDATE_MINB_F32 3
#endif
#ifndef UPDATE_MINB_Q
#define UPDATE_MINB_Q 3
#endif
#ifndef UPDATE_MINB_QFIXED
#define UPDATE_MINB_QFIXED 4
#endif

#define UPDATE_CALL(R, MT, GT, F, TILES, Q, MK, G, OU) update_kernel<R, MT, GT, F, TILES, Q, MK, G, OU>(UPDATE_ARGS)

// UPDATE_K defines the kernel NAME and NAME_tiles, the one that also takes
// MODE_TILE segments, for MINB blocks per SM (the _tiles kernel 3).
#define UPDATE_K(NAME, R, MT, GT, F, Q, MK, G, OU, MINB)                                               \
    extern "C" __global__ void __launch_bounds__(256, MINB) NAME(UPDATE_PARAMS) {                \
        if (ctl_skip(ctl)) return;                                                                \
        if (ctl != nullptr) gs = ctl->gs;                                                         \
        UPDATE_CALL(R, MT, GT, F, false, Q, MK, G, OU);                                           \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(256, 3) NAME##_tiles(UPDATE_PARAMS) {           \
        if (ctl_skip(ctl)) return;                                                                \
        if (ctl != nullptr) gs = ctl->gs;                                                         \
        UPDATE_CALL(R, MT, GT, F, true, Q, MK, G, OU);                                            \
    }
#define UPDATE(NAME, R, MT, GT, F) \
    UPDATE_K(NAME, R, MT, GT, F, false, ANY, GROUP, UNROLL, sizeof(MT) == 2 ? UPDATE_MINB_BF16 : UPDATE_MINB_F32)
#define UPDATE_Q(NAME, R, F, MK)                                                                         \
    UPDATE_K(NAME, R, float, float, F, true, MK,                                                         \
             MK == ANY ? 1u : MK == FP8_FP8 ? UPDATE_QFIXED_GROUP_FP8V : UPDATE_QFIXED_GROUP,            \
             MK == ANY ? UNROLL : UPDATE_QFIXED_OUTER,                                                   \
             MK == ANY ? UPDATE_MINB_Q : MK == FP8_FP8 ? UPDATE_MINB_QFIXED_FP8V : UPDATE_MINB_QFIXED)

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
// Moments of any storage (moments.cuh) and either gradient type. (SGD has
// none: its one moment in float32 or bfloat16 takes the kernels above.)
UPDATE_Q(update_adamw_q_e4m3, RULE_ADAMW, E4M3, ANY)
UPDATE_Q(update_adamw_q_e5m2, RULE_ADAMW, E5M2, ANY)
UPDATE_Q(update_adamw_q_fp8_fp8_e4m3, RULE_ADAMW, E4M3, FP8_FP8)
UPDATE_Q(update_adamw_q_fp8_fp8_e5m2, RULE_ADAMW, E5M2, FP8_FP8)
UPDATE_Q(update_adamw_q_fp8_bf16_e4m3, RULE_ADAMW, E4M3, FP8_BF16)
UPDATE_Q(update_adamw_q_fp8_bf16_e5m2, RULE_ADAMW, E5M2, FP8_BF16)
UPDATE_Q(update_sgd_q_fp8_e4m3, RULE_SGD, E4M3, FP8_FP8)
UPDATE_Q(update_sgd_q_fp8_e5m2, RULE_SGD, E5M2, FP8_FP8)
