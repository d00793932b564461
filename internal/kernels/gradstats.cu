// gradstats.cu: the gradient statistics of optimizer.AddSquare: the exact
// fixed-point sum of the float32 squares of a gradient shard in NormLimbs
// (9) 32-bit limbs, limb k counting units of 2^(32k-149), and the count of
// elements whose value or square is not finite, added into stats[0..9]
// (int64).
//
// Each thread accumulates its elements in unsigned 64-bit limbs and
// propagates their carries; a block adds its threads' limbs in shared
// memory, then atomically into stats (two's-complement addition, exactly
// the int64 sum). grad_stats_normalize, launched after, propagates the
// carries of stats as optimizer.Normalize does, so that limbs 0..7 lie in
// [0, 2^32): the normalised form of an integer is unique, so the result
// equals the CPU backend's whatever the order of the additions.
#include "bf16.cuh"

using namespace distopt;

static const int LIMBS = 9;

// Each thread adds its squares into a window of three limbs L, L+1, L+2
// kept in registers (an element's 56-bit term spans limbs li and li+1); an
// element outside the window flushes it into acc, by predicated adds over
// the unrolled limbs (never a computed index, which would put acc in local
// memory), and moves the window to its own limb. Gradients of similar
// magnitude, the common case, stay in the window.
__device__ __forceinline__ void flush(u64 acc[LIMBS + 1], int L, u64 w0, u64 w1, u64 w2) {
#pragma unroll
    for (int k = 0; k < LIMBS; k++)
        acc[k] += (k == L ? w0 : 0ull) + (k == L + 1 ? w1 : 0ull) + (k == L + 2 ? w2 : 0ull);
}

__device__ __forceinline__ float ld_grad(const float *g, u64 i) { return g[i]; }
__device__ __forceinline__ float ld_grad(const u16 *g, u64 i) { return bf16_to_f32(g[i]); }

template <typename GT> __device__ void grad_stats_kernel(long long *stats, const GT *__restrict__ g, u64 n) {
    __shared__ unsigned long long sh[LIMBS + 1];
    u64 acc[LIMBS + 1];
#pragma unroll
    for (int k = 0; k <= LIMBS; k++) acc[k] = 0;
    if (threadIdx.x <= LIMBS) sh[threadIdx.x] = 0;
    u64 w0 = 0, w1 = 0, w2 = 0, bad = 0;
    int L = 0;
    const u64 t = thread_index(), stride = grid_stride();
    for (u64 i = t; i < n; i += stride) {
        const float x = ld_grad(g, i);
        const u32 b = __float_as_uint(__fmul_rn(x, x));
        if ((b & 0x7f800000u) == 0x7f800000u) {
            bad++;
            continue;
        }
        if (b == 0) continue;
        u32 e = b >> 23;
        u64 m = b & 0x7fffffu;
        if (e > 0) m |= 0x800000u;
        else e = 1;
        const u32 pos = e - 1;
        const u64 v = m << (pos % 32);
        const int li = (int)(pos / 32);
        const u64 lo = v & 0xffffffffu, hi = v >> 32;
        if (li == L) {
            w0 += lo;
            w1 += hi;
        } else if (li == L + 1) {
            w1 += lo;
            w2 += hi;
        } else {
            flush(acc, L, w0, w1, w2);
            L = li;
            w0 = lo;
            w1 = hi;
            w2 = 0;
        }
    }
    flush(acc, L, w0, w1, w2);
    acc[LIMBS] = bad;
#pragma unroll
    for (int k = 0; k < LIMBS - 1; k++) {
        acc[k + 1] += acc[k] >> 32;
        acc[k] &= 0xffffffffu;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k <= LIMBS; k++)
        if (acc[k]) atomicAdd(&sh[k], (unsigned long long)acc[k]);
    __syncthreads();
    if (threadIdx.x <= LIMBS && sh[threadIdx.x])
        atomicAdd(reinterpret_cast<unsigned long long *>(stats) + threadIdx.x, sh[threadIdx.x]);
}

extern "C" {
__global__ void grad_stats_f32(long long *stats, const float *g, u64 n) { grad_stats_kernel(stats, g, n); }
__global__ void grad_stats_bf16(long long *stats, const u16 *g, u64 n) { grad_stats_kernel(stats, g, n); }

// grad_stats_normalize is optimizer.Normalize on stats (one thread).
__global__ void grad_stats_normalize(long long *stats) {
    if (thread_index() != 0) return;
    for (int k = 0; k < LIMBS - 1; k++) {
        const long long c = stats[k] >> 32;
        stats[k] &= 0xffffffffll;
        stats[k + 1] += c;
    }
}
}
