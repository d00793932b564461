// moments.cuh: moment storage for update.cu's _q kernels, whose moments are
// each float32, bfloat16 or FP8 (a runtime choice: MomentSet.t1, t2). An
// FP8 moment is E4M3 codes with a float32 scale_inv per block of
// 2^MomentSet.shift (32, 64 or 128) elements, blocks counted from the shard's
// first element; segments start at block boundaries, so a block is 8, 16 or
// 32 consecutive lanes of a warp (4 elements each), whose amax one
// butterfly of shuffles reduces. The reference is optimizer/backend's
// EncodeMomentBlock, DecodeMoment, EncodeSR, MomentHash.
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

// encode_sr is backend.EncodeSR: E4M3 with stochastic rounding by rnd.
__device__ __forceinline__ u32 encode_sr(float z, u32 rnd) {
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

// mom_load reads the cnt elements at i of moment `which` (0: m, 1: v) as
// float32 (zeros past cnt): FP8 codes decoded and multiplied by their
// block's scale_inv, then squared for v (backend.DecodeMoment).
__device__ __forceinline__ void mom_load(const MomentSet &ms, int which, u64 i, int cnt, bool vec, float x[4]) {
    const u32 t = which ? ms.t2 : ms.t1;
    const void *p = which ? ms.p2 : ms.p1;
    if (t == MOM_F32) {
        load((const float *)p, i, cnt, vec, x);
        return;
    }
    if (t == MOM_BF16) {
        load((const u16 *)p, i, cnt, vec, x);
        return;
    }
    const u8 *c = (const u8 *)p;
    const float inv = cnt > 0 ? (which ? ms.s2 : ms.s1)[i >> ms.shift] : 1.0f;
    u32 w = 0;
    if (vec) w = *reinterpret_cast<const u32 *>(c + i);
    else {
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (j < cnt) w |= (u32)c[i + j] << (8 * j);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float r = __fmul_rn(decode<E4M3>((w >> (8 * j)) & 0xffu), inv);
        x[j] = j < cnt ? (which ? __fmul_rn(r, r) : r) : 0.0f;
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
    for (u32 o = 1; o < lanes; o <<= 1) k = max(k, __shfl_xor_sync(FULL, k, o));
    float sc, inv;
    moment_scale(k, sc, inv);
    float z[4];
#pragma unroll
    for (int j = 0; j < 4; j++) z[j] = __fmul_rn(y[j], sc);
    u8 *c = (u8 *)p;
    if (which == 0) {
        cast_store<E4M3>(c, i, cnt, vec, z);
    } else {
        u32 w = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) w |= encode_sr(z[j], moment_hash(ms.seed, ms.base + i + j)) << (8 * j);
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
