// moments.cuh: moment storage for update.cu's _q kernels, whose moments are
// each float32, bfloat16 or FP8 (a runtime choice: MomentSet.t1, t2). An
// FP8 moment is E4M3 codes with a float32 scale_inv per block of
// 2^MomentSet.shift (32, 64 or 128) elements, blocks counted from the shard's
// first element; segments start at block boundaries, so a block is 8, 16 or
// 32 consecutive lanes of a warp (4 elements each), whose amax one
// butterfly of shuffles (8, 16 lanes) or one redux.sync (32) reduces. The
// loads (mom_fetch) are apart from the arithmetic (mom_widen) so that
// update.cu can have the loads of several passes in flight at once. The
// reference is optimizer/backend's EncodeMomentBlock, DecodeMoment,
// EncodeDither, DitherBits.
#pragma once
#include "segments.cuh"

namespace distopt {

enum MomentType { MOM_F32 = 0, MOM_BF16 = 1, MOM_FP8 = 2 };

// mom_align is the alignment in bytes that a vector access of 4 elements
// of storage t needs (one word of 4 codes for FP8).
__device__ __forceinline__ u64 mom_align(u32 t) { return t == MOM_F32 ? 16 : t == MOM_BF16 ? 8 : 4; }

// MomentSet is the storage of both moments of a _q launch.
struct MomentSet {
    void *p1, *p2;     // m, v: elements or E4M3 codes
    float *s1, *s2;    // FP8 block scales (scale_inv)
    u32 t1, t2, shift; // MomentType of each; log2 of the FP8 block (a power of two)
    u32 seed;          // stochastic rounding of v (EncodeMomentBlock)
    u64 base;          // bucket position of shard element 0
};

// mix32 is murmur3's 32-bit finaliser (backend.mix32).
__device__ __forceinline__ u32 mix32(u32 x) {
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

// moment_hash is backend.MomentHash.
__device__ __forceinline__ u32 moment_hash(u32 seed, u64 q) {
    return mix32(seed ^ (u32)q ^ ((u32)(q >> 32) * 0xc2b2ae35u));
}

// decode4_mom returns the four E4M3 codes of w (the low byte first) as
// float32, NaN codes as a NaN of any payload (mom_widen multiplies them by
// the scale, which gives the canonical NaN anyway): with the hardware
// conversion two codes per instruction.
__device__ __forceinline__ void decode4_mom(u32 w, float x[4]) {
#if DISTOPT_FP8_HW
#pragma unroll
    for (int h = 0; h < 2; h++) {
        u32 h2;
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((u16)(w >> (16 * h))));
        asm("cvt.f32.f16 %0, %1;" : "=f"(x[2 * h]) : "h"((u16)h2));
        asm("cvt.f32.f16 %0, %1;" : "=f"(x[2 * h + 1]) : "h"((u16)(h2 >> 16)));
    }
#else
#pragma unroll
    for (int j = 0; j < 4; j++) x[j] = decode_soft<E4M3>((w >> (8 * j)) & 0xffu);
#endif
}

// dither4 is backend.EncodeDither's rounding of the four scaled roots z at
// bucket positions pos..pos+3 (pos a multiple of 4: the launcher's
// contract) before the conversion to nearest: the bits of z[j], at least
// 2^19, plus DitherOffset of half j&1 of moment_hash(seed, pos/2 + j/2);
// or, when the block's amax key k is Inf or NaN, z[j] itself. The roots
// are never negative (v >= +0, and the GPU's NaN is positive), so their
// bits are their AbsBits, and a NaN of either sign encodes to 0x7f.
// The caller passes ph = pos/2 (a whole chunk's passes add a constant).
__device__ __forceinline__ void dither4(const MomentSet &ms, u64 ph, u32 k, const float z[4], u32 d[4]) {
    const bool live = k < 0x7f800000u;
    // pos/2 is even: pos/2 + 1 differs in bit 0 only
    const u32 x = ms.seed ^ (u32)ph ^ ((u32)(ph >> 32) * 0xc2b2ae35u);
    const u32 h0 = live ? mix32(x) : 0u, h1 = live ? mix32(x ^ 1u) : 0u;
    const u32 bias = live ? 0x7fff8u : 0u; // 2^19 - 8
    const u32 r[4] = {h0 << 4, h0 >> 12, h1 << 4, h1 >> 12};
#pragma unroll
    for (int j = 0; j < 4; j++) d[j] = max(__float_as_uint(z[j]), 0x80000u) + (r[j] & 0xffff0u) - bias;
}

// encode4_mom packs the E4M3 codes (to nearest) of the four float32 bit
// patterns d, d[0] into the low byte.
__device__ __forceinline__ u32 encode4_mom(const u32 d[4]) {
#if DISTOPT_FP8_HW
    u16 lo, hi;
    u32 w;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(__uint_as_float(d[1])), "f"(__uint_as_float(d[0])));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(__uint_as_float(d[3])), "f"(__uint_as_float(d[2])));
    asm("mov.b32 %0, {%1, %2};" : "=r"(w) : "h"(lo), "h"(hi));
    return w;
#else
    u32 w = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) w |= encode_soft<E4M3>(__uint_as_float(d[j])) << (8 * j);
    return w;
#endif
}

// store_codes writes the first cnt bytes of w at c + i (one word when vec).
__device__ __forceinline__ void store_codes(u8 *c, u64 i, int cnt, bool vec, u32 w) {
    if (vec) {
        *reinterpret_cast<u32 *>(c + i) = w;
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (j < cnt) c[i + j] = (u8)(w >> (8 * j));
}

// moment_scale is backend.MomentScale: fp8.ScaleFromAmax(amax, E4M3, 0,
// power of two) from the bits of the amax key k, without a division or a
// branch: s = 135 - E - (M > 1.75) for k's biased exponent E and mantissa
// M, at most 127 (which a subnormal k gives), scale 2^s and scale_inv 2^-s
// (2^-127 is the subnormal 0x00400000); 1 and 1 for a zero, infinite or
// NaN k.
__device__ __forceinline__ void moment_scale(u32 k, float &sc, float &inv) {
    const int s = min(135 - (int)(k >> 23) - ((k & 0x7fffffu) > 0x600000u ? 1 : 0), 127);
    const bool special = k - 1u >= 0x7f7fffffu; // k == 0 or k >= 0x7f800000
    sc = __uint_as_float(special ? 0x3f800000u : (u32)(s + 127) << 23);
    inv = __uint_as_float(special ? 0x3f800000u : s == 127 ? 0x00400000u : (u32)(127 - s) << 23);
}

// Words is what a pass reads of one operand before any arithmetic, so that
// the loads of a group of passes are all in flight at once (update.cu):
// the little-endian words of the storage of its cnt elements, zeros past
// cnt (float32: w[0..3], bfloat16: w[0..1], FP8: w[0]), and an FP8
// moment's block scale_inv.
struct Words {
    u32 w[4];
    float inv;
};

// ld_words reads into w the storage of the cnt elements at i of an array
// of SIZE-byte elements (4, 2 or 1): one vector access when VEC (then cnt
// is 4 and the address aligned).
template <int SIZE, bool VEC> __device__ __forceinline__ void ld_words(const void *p, u64 i, int cnt, u32 w[4]) {
#pragma unroll
    for (int j = 0; j < 4; j++) w[j] = 0;
    if (VEC && SIZE == 4) {
        const uint4 x = *reinterpret_cast<const uint4 *>((const u32 *)p + i);
        w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
    } else if (VEC && SIZE == 2) {
        const uint2 x = *reinterpret_cast<const uint2 *>((const u16 *)p + i);
        w[0] = x.x, w[1] = x.y;
    } else if (VEC) {
        w[0] = *reinterpret_cast<const u32 *>((const u8 *)p + i);
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (j >= cnt) break;
            if (SIZE == 4) w[j] = ((const u32 *)p)[i + j];
            else if (SIZE == 2) w[j >> 1] |= (u32)((const u16 *)p)[i + j] << (16 * (j & 1));
            else w[0] |= (u32)((const u8 *)p)[i + j] << (8 * j);
        }
    }
}

// widen returns as float32 the four elements of SIZE-byte words (float32,
// or bfloat16 widened exactly).
template <int SIZE> __device__ __forceinline__ void widen(const u32 w[4], float x[4]) {
#pragma unroll
    for (int j = 0; j < 4; j++)
        x[j] = SIZE == 4 ? __uint_as_float(w[j]) : bf16_to_f32((w[j >> 1] >> (16 * (j & 1))) & 0xffffu);
}

// mom_fetch reads the storage of the cnt elements at i of moment `which`
// (0: m, 1: v), of the type the launch gives it (and an FP8 block's
// scale_inv); mom_widen turns it into float32.
template <bool VEC>
__device__ __forceinline__ void mom_fetch(const MomentSet &ms, int which, u64 i, int cnt, Words &r) {
    const u32 t = which ? ms.t2 : ms.t1;
    const void *p = which ? ms.p2 : ms.p1;
    r.inv = 1.0f;
    if (t == MOM_F32) {
        ld_words<4, VEC>(p, i, cnt, r.w);
    } else if (t == MOM_BF16) {
        ld_words<2, VEC>(p, i, cnt, r.w);
    } else {
        ld_words<1, VEC>(p, i, cnt, r.w);
        if (VEC || cnt > 0) r.inv = (which ? ms.s2 : ms.s1)[i >> ms.shift];
    }
}

// mom_widen returns the float32 moments of what mom_fetch read: FP8 codes
// decoded and multiplied by their block's scale_inv, then squared for v
// (backend.DecodeMoment); zeros past cnt, the codes there being 0.
__device__ __forceinline__ void mom_widen(const MomentSet &ms, int which, const Words &r, float x[4]) {
    const u32 t = which ? ms.t2 : ms.t1;
    if (t == MOM_F32) {
        widen<4>(r.w, x);
        return;
    }
    if (t == MOM_BF16) {
        widen<2>(r.w, x);
        return;
    }
    float c[4];
    decode4_mom(r.w[0], c);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float d = __fmul_rn(c[j], r.inv);
        x[j] = which ? __fmul_rn(d, d) : d;
    }
}

// mom_store writes the first cnt of moment `which` at i: x (float32,
// bfloat16), or for FP8 y (m itself, or the root of v) encoded with the
// scale of its block's amax, reduced over the block's lanes (every lane of
// the warp must call it), m to nearest and v dithered (dither4,
// backend.EncodeMomentBlock); the block's first lane writes the scale_inv.
// si is the index of the elements' block scale (i >> ms.shift) and ph
// their bucket position over 2 ((ms.base + i) / 2), which the caller may
// have at a lower cost (update.cu's whole chunks).
__device__ __forceinline__ void mom_store(const MomentSet &ms, int which, u64 i, int cnt, bool vec, const float x[4],
                                          const float y[4], u64 si, u64 ph) {
    const u32 t = which ? ms.t2 : ms.t1;
    void *p = which ? ms.p2 : ms.p1;
    if (t == MOM_F32) {
        store((float *)p, i, cnt, vec, x);
        return;
    }
    if (t == MOM_BF16) {
        store((u16 *)p, i, cnt, vec, x);
        return;
    }
    // the roots of v are never negative (dither4): their bits are their keys
    u32 k = 0;
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (j < cnt) k = max(k, which ? __float_as_uint(y[j]) : amax_bits(y[j]));
    const u32 lanes = 1u << (ms.shift - 2);
    if (lanes == 32) {
        k = __reduce_max_sync(FULL, k);
    } else { // 8 or 16 lanes
        k = max(k, __shfl_xor_sync(FULL, k, 1));
        k = max(k, __shfl_xor_sync(FULL, k, 2));
        k = max(k, __shfl_xor_sync(FULL, k, 4));
        if (lanes == 16) k = max(k, __shfl_xor_sync(FULL, k, 8));
    }
    float sc, inv;
    moment_scale(k, sc, inv);
    float z[4];
    u32 d[4];
#pragma unroll
    for (int j = 0; j < 4; j++) z[j] = __fmul_rn(y[j], sc), d[j] = __float_as_uint(z[j]);
    if (which) dither4(ms, ph, k, z, d);
    store_codes((u8 *)p, i, cnt, vec, encode4_mom(d));
    if (((threadIdx.x & 31) & (lanes - 1)) == 0 && cnt > 0) (which ? ms.s2 : ms.s1)[si] = inv;
}

} // namespace distopt
