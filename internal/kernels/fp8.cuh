// fp8.cuh: float32 <-> FP8 (E4M3, E5M2) conversions of distopt.
//
// Semantics (those of the fp8 package, which is the reference):
//   encode: round to nearest, ties to even, with subnormals; |x| above the
//     largest finite value (448 for E4M3, 57344 for E5M2), and +-Inf, give
//     +-max ("satfinite"); every NaN gives 0x7f; a negative x that rounds to
//     zero gives 0x80.
//   decode: exact; NaN codes give the float32 NaN 0x7fc00000; E5M2 +-Inf
//     codes give +-Inf.
//
// For compute capability 9.0 and up the PTX uses the hardware conversion
// (cvt.rn.satfinite.{e4m3,e5m2}x2.f32 and cvt.rn.f16x2.{e4m3,e5m2}x2); below
// it, the same results are computed with integer operations.
#pragma once
#include "common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DISTOPT_FP8_HW 1
#else
#define DISTOPT_FP8_HW 0
#endif

namespace distopt {

enum Fp8 { E4M3, E5M2 };

// Constants of a format.
template <Fp8 F> struct fp8_spec;
template <> struct fp8_spec<E4M3> {
    static const u32 mbits = 3, bias = 7;
    static const u32 max_bits = 0x43e00000u; // 448.0f
    static const u32 max_code = 0x7eu;
};
template <> struct fp8_spec<E5M2> {
    static const u32 mbits = 2, bias = 15;
    static const u32 max_bits = 0x47600000u; // 57344.0f
    static const u32 max_code = 0x7bu;
};

// The code every NaN encodes to, in both formats.
static const u32 fp8_nan_code = 0x7fu;
// The float32 every NaN code decodes to.
static const u32 f32_nan_bits = 0x7fc00000u;

// shift_rne returns v / 2^s rounded to nearest, ties to even (1 <= s <= 31;
// v + 2^(s-1) must fit in 32 bits).
__device__ __forceinline__ u32 shift_rne(u32 v, u32 s) {
    return (v + (1u << (s - 1)) - 1u + ((v >> s) & 1u)) >> s;
}

// encode_soft is the integer implementation of encode, one value.
template <Fp8 F> __device__ __forceinline__ u32 encode_soft(float x) {
    typedef fp8_spec<F> S;
    const u32 b = __float_as_uint(x);
    const u32 sign = (b >> 24) & 0x80u;
    const u32 a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return fp8_nan_code;
    // Everything above max rounds to max or to a code beyond it.
    if (a > S::max_bits) return sign | S::max_code;
    // Normal in the target (at least 2^(1-bias)): round the float32
    // significand to mbits, rebase the exponent; a carry moves up one binade.
    if (a >= (127u + 1u - S::bias) << 23)
        return sign | (shift_rne(a, 23u - S::mbits) - ((127u - S::bias) << S::mbits));
    // Subnormal in the target: the value in units of the smallest subnormal,
    // 2^(1-bias-mbits), is significand * 2^(e-23-(1-bias-mbits)).
    if (a < 0x00800000u) return sign; // zero or float32 subnormal: far below
    const int e = (int)(a >> 23) - 127;
    const int s = 24 - (int)S::bias - (int)S::mbits - e; // >= 21 here
    if (s > 25) return sign; // below half the smallest subnormal
    return sign | shift_rne((a & 0x7fffffu) | 0x800000u, (u32)s);
}

// decode_soft is the integer implementation of decode, one code.
template <Fp8 F> __device__ __forceinline__ float decode_soft(u32 c) {
    typedef fp8_spec<F> S;
    const u32 sign = (c & 0x80u) << 24;
    const u32 e = (c & 0x7fu) >> S::mbits;
    const u32 m = c & ((1u << S::mbits) - 1u);
    const u32 emax = (1u << (7u - S::mbits)) - 1u;
    if (F == E4M3 && (c & 0x7fu) == 0x7fu) return __uint_as_float(f32_nan_bits);
    if (F == E5M2 && e == emax) return m ? __uint_as_float(f32_nan_bits) : __uint_as_float(sign | 0x7f800000u);
    if (e == 0) { // m * 2^(1-bias-mbits), exact
        const float unit = __uint_as_float((127u + 1u - S::bias - S::mbits) << 23);
        return __uint_as_float(sign | __float_as_uint(__fmul_rn((float)m, unit)));
    }
    return __uint_as_float(sign | ((e + 127u - S::bias) << 23) | (m << (23u - S::mbits)));
}

#if DISTOPT_FP8_HW
// encode2_hw converts two floats with one instruction: lo into bits 0-7, hi
// into bits 8-15.
template <Fp8 F> __device__ __forceinline__ u32 encode2_hw(float lo, float hi) {
    u16 r;
    if (F == E4M3)
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// decode2_hw converts the two codes in bits 0-15 of c (low byte first).
template <Fp8 F> __device__ __forceinline__ void decode2_hw(u32 c, float &lo, float &hi) {
    u32 h2;
    const u16 c16 = (u16)c;
    if (F == E4M3)
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(c16));
    else
        asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(c16));
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"((u16)h2));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"((u16)(h2 >> 16)));
    // One NaN for every NaN code, as decode_soft gives.
    if (lo != lo) lo = __uint_as_float(f32_nan_bits);
    if (hi != hi) hi = __uint_as_float(f32_nan_bits);
}
#endif

// encode converts one float.
template <Fp8 F> __device__ __forceinline__ u32 encode(float x) {
#if DISTOPT_FP8_HW
    return encode2_hw<F>(x, 0.0f) & 0xffu;
#else
    return encode_soft<F>(x);
#endif
}

// encode4 converts four floats into one word, x.x in the low byte.
template <Fp8 F> __device__ __forceinline__ u32 encode4(float4 x) {
#if DISTOPT_FP8_HW
    // the halves joined by mov (no masks: ptxas merges the conversions)
    u16 lo, hi;
    u32 w;
    if (F == E4M3) {
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(x.y), "f"(x.x));
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(x.w), "f"(x.z));
    } else {
        asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(x.y), "f"(x.x));
        asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(x.w), "f"(x.z));
    }
    asm("mov.b32 %0, {%1, %2};" : "=r"(w) : "h"(lo), "h"(hi));
    return w;
#else
    return encode_soft<F>(x.x) | encode_soft<F>(x.y) << 8 | encode_soft<F>(x.z) << 16 |
           encode_soft<F>(x.w) << 24;
#endif
}

// decode converts one code.
template <Fp8 F> __device__ __forceinline__ float decode(u32 c) {
#if DISTOPT_FP8_HW
    float lo, hi;
    decode2_hw<F>(c & 0xffu, lo, hi);
    return lo;
#else
    return decode_soft<F>(c);
#endif
}

// decode4 converts the four codes of a word, the low byte into .x.
template <Fp8 F> __device__ __forceinline__ float4 decode4(u32 c) {
    float4 r;
#if DISTOPT_FP8_HW
    decode2_hw<F>(c, r.x, r.y);
    decode2_hw<F>(c >> 16, r.z, r.w);
#else
    r.x = decode_soft<F>(c & 0xffu);
    r.y = decode_soft<F>((c >> 8) & 0xffu);
    r.z = decode_soft<F>((c >> 16) & 0xffu);
    r.w = decode_soft<F>(c >> 24);
#endif
    return r;
}

} // namespace distopt
