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
// EncodeSR, MomentHash.
#pragma once
#include "segments.cuh"

namespace distopt {

enum MomentType { MOM_F32 = 0, MOM_BF16 = 1, MOM_FP8 = 2 };

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
__device__ __forceinline__ u32 moment_hash(u32 seed, u64 pos) {
    return mix32(seed ^ (u32)pos ^ ((u32)(pos >> 32) * 0xc2b2ae35u));
}

// encode_sr_slow is backend.EncodeSR: E4M3 with stochastic rounding by
// rnd, for any z.
__device__ __noinline__ u32 encode_sr_slow(float z, u32 rnd) {
    const u32 b = __float_as_uint(z), a = b & 0x7fffffffu;
    if (a == 0 || a >= 0x7f800000u) return encode<E4M3>(z);
    int e = (int)(a >> 23);
    u32 m = a & 0x7fffffu;
    if (e == 0) e = 1;
    else m |= 0x800000u;
    const int qe = max(e - 130, -9);
    const u32 k = (u32)(qe - (e - 150)); // at least 20
    u32 n = 0, t = 0;                    // t: the fraction as a 32-bit fixed point
    if (k <= 24) n = m >> k, t = (m & ((1u << k) - 1)) << (32 - k);
    else if (k <= 32) t = m << (32 - k);
    else if (k < 64) t = m >> (k - 32);
    if (t > rnd) n++;
    float v = __fmul_rn((float)n, __uint_as_float((u32)(qe + 127) << 23));
    if (b >> 31) v = -v;
    return encode<E4M3>(v);
}

// encode_sr is backend.EncodeSR: E4M3 with stochastic rounding by rnd.
// For 2^-6 <= |z| < Inf (E4M3's normal binades and above, the common case)
// the spacing q is 2^-3 of z's binade, the low 20 bits of z's float32
// significand: rounding up when that fraction f exceeds rnd's top 20 bits R
// (backend.EncodeSR's t > rnd, t's low 12 bits being zero) is a carry out
// of f + (2^20-1-R), and z's bits thus rounded, shifted right by 20, are
// the E4M3 code plus 120<<3 (the bias difference), saturated at 0x7e (a
// carry into float32's exponent moves to the next binade, as n = 16 does).
// Every other z takes encode_sr_slow (moments_model_test.go checks the
// two against the reference).
__device__ __forceinline__ u32 encode_sr(float z, u32 rnd) {
    const u32 b = __float_as_uint(z), a = b & 0x7fffffffu;
    if (a - 0x3c800000u < 0x7f800000u - 0x3c800000u)
        return min(((a + (~rnd >> 12)) >> 20) - 0x3c0u, 0x7eu) | ((b >> 24) & 0x80u);
    return encode_sr_slow(z, rnd);
}

// moment_scale is backend.MomentScale: fp8.ScaleFromAmax(amax, E4M3, 0,
// power of two) from the bits of the amax key k, without a division.
__device__ __forceinline__ void moment_scale(u32 k, float &sc, float &inv) {
    if (k == 0 || k >= 0x7f800000u) {
        sc = 1.0f, inv = 1.0f;
        return;
    }
    const int e = (int)(k >> 23);
    const int s = e == 0 ? 127 : min(8 - (e - 127) - ((k & 0x7fffffu) > 0x600000u ? 1 : 0), 127);
    sc = __uint_as_float((u32)(s + 127) << 23);
    inv = s == 127 ? __uint_as_float(0x00400000u) : __uint_as_float((u32)(127 - s) << 23); // 2^-127 is subnormal
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
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float d = __fmul_rn(decode<E4M3>((r.w[0] >> (8 * j)) & 0xffu), r.inv);
        x[j] = which ? __fmul_rn(d, d) : d;
    }
}

// mom_store writes the first cnt of moment `which` at i: x (float32,
// bfloat16), or for FP8 y (m itself, or the root of v) encoded with the
// scale of its block's amax, reduced over the block's lanes (every lane of
// the warp must call it), m to nearest and v stochastically
// (backend.EncodeMomentBlock); the block's first lane writes the scale_inv.
__device__ __forceinline__ void mom_store(const MomentSet &ms, int which, u64 i, int cnt, bool vec, const float x[4],
                                          const float y[4]) {
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
    u32 k = keys4(y, cnt);
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
#pragma unroll
    for (int j = 0; j < 4; j++) z[j] = __fmul_rn(y[j], sc);
    u8 *c = (u8 *)p;
    if (which == 0) {
        cast_store<E4M3>(c, i, cnt, vec, z);
    } else {
        // moment_hash(seed, pos + j) with the high half's product taken
        // once (pos + j carries into it when the low half wraps)
        const u64 pos = ms.base + i;
        const u32 lo = (u32)pos, hc = (u32)(pos >> 32) * 0xc2b2ae35u;
        u32 w = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const u32 l = lo + (u32)j, h = l < lo ? hc + 0xc2b2ae35u : hc;
            w |= encode_sr(z[j], mix32(ms.seed ^ l ^ h)) << (8 * j);
        }
        if (vec) *reinterpret_cast<u32 *>(c + i) = w;
        else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (j < cnt) c[i + j] = (u8)(w >> (8 * j));
        }
    }
    if (((threadIdx.x & 31) & (lanes - 1)) == 0 && cnt > 0) (which ? ms.s2 : ms.s1)[i >> ms.shift] = inv;
}

} // namespace distopt
