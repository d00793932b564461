// gradstats.cu: the gradient statistics of optimizer.AddSquare: the exact
// fixed-point sum of the float32 squares q = fl32(x*x) of a gradient shard in
// NormLimbs (9) 32-bit limbs, limb k counting units of 2^(32k-149), and the
// count of elements whose value or square is not finite, added into
// stats[0..9] (int64); grad_stats_normalize, launched after, propagates the
// carries as optimizer.Normalize does.
//
// # Scheme (grad_stats_f32, grad_stats_bf16)
//
// Each thread reads its elements 16 bytes at a time (a grid-stride loop over
// aligned vectors; the < 8 elements before the first 16-byte boundary and
// after the last one go through the integer path below) and keeps a window
// of exponents [E, E+W) with two float64 accumulators. A square q with
// 2^(E-127) <= q < 2^(E+W-127), or q = 0, is converted to float64 and added
// to an accumulator (even elements to one, odd to the other); every other
// square goes to the integer path: it is added as optimizer.AddSquare adds
// it (m << pos%32 over limbs pos/32 and pos/32+1) into the thread's own
// unsigned 64-bit limbs in shared memory, or counted when not finite. Before
// the window moves, and at least every P vectors, the accumulators are
// flushed: each is an integer number v < 2^53 of units 2^(E-127-F) (see
// below), converted exactly (a scaling by a power of two and a conversion of
// an integer-valued float64) and added at its bit position into the limbs.
// The window follows the data: it starts on the thread's first square; a
// finite square above it moves it to end H = 4 exponents above that square;
// 16 squares below it within one flush period move it to end H above the
// largest of them. Where the window is
// never changes what is added, only how often the integer path runs. At the
// end each thread propagates its limbs' carries (limbs 0..7 then lie in
// [0, 2^32)), a warp then a block add them (shuffles, shared memory), and
// one thread per limb adds the block's sum into stats with a 64-bit atomic
// (two's-complement addition: exactly the int64 sum).
//
// # Why the sum is exact and does not depend on the order
//
// Let u = 2^(E-127-F), F = 23 for float32 gradients and F = 15 for
// bfloat16. (1) Every square in the window is a multiple of u: a float32
// square of biased exponent e >= E (E >= 1: no subnormal is in the window)
// is a multiple of its ulp 2^(e-150) >= 2^(E-150). For a bfloat16 x = s*2^k
// (s < 2^8 an integer; a subnormal x squares to 0), x*x = s^2*2^(2k) has at
// most 16 significant bits, so a normal square is exact, lies in
// [2^(2k+14), 2^(2k+16)), has e-127 <= 2k+15 and is a multiple of
// 2^(2k) >= 2^(e-142) >= u; a square rounded into the subnormal range is
// below 2^-126 <= 2^(E-127), outside the window. Zero is a multiple of
// anything. (2) Every square in the window is below 2^(E+W-127) =
// 2^(W+F)*u, and an accumulator receives at most C = P*V/2 squares between
// flushes (V elements per vector, half of them to each accumulator). With
// W = 22, P = 128, V = 4 for float32 (C = 2^8) and W = 28, P = 256, V = 8 for
// bfloat16 (C = 2^10), log2(C) + W + F = 53, so every partial sum is an
// integer multiple of u below 2^53*u: a float64 represents it exactly (u >=
// 2^-149 is far above float64's smallest normal), hence every float64
// addition is exact, and the flushed v < 2^53 is exactly the sum of the
// squares added. (3) The integer path adds pieces below 2^32 into unsigned
// 64-bit limbs; a flush period adds at most 8 pieces per element (2 for
// its square, 6 for a flush of the window it moves) to a limb, and every
// period ends by propagating carries, so no limb wraps; after the last
// period limbs 0..7 are below 2^32 and a block's sums below 2^40. Pieces
// at limb 9 and beyond would stand for 2^288 units: every sum formed is
// below 2^(10+128+149), so they are zero (and skipped). Hence each
// thread's limbs hold exactly the integer sum of its squares (in units of
// 2^-149), each block's atomics add exactly that into stats, and after
// grad_stats_normalize stats holds the unique normalised form (limbs 0..7 in
// [0, 2^32)) of the exact sum: the same integer, thus the same bits, for any
// grid, any order of the atomics, any split of the gradients over calls or
// ranks, and as the CPU reference computes it. The non-finite count is an
// integer count, exact likewise.
//
// The kernels must be launched with GS_BLOCK threads per block (they trap
// otherwise). grad_stats_v1_* are the first kernels (a 3-limb integer
// window per thread, one element at a time), kept only as the benchmarks'
// baseline and the tests' second GPU implementation.
#include "bf16.cuh"

using namespace distopt;

static const int LIMBS = 9;
static const int GS_BLOCK = 256;

// Traits of a gradient type: V elements per 16-byte vector, window width W
// (exponents), F such that u = 2^(E-127-F), flush period P (vectors),
// U vectors per loop iteration. The exactness bound log2(P*V/2)+W+F <= 53 is
// checked at compile time.
template <typename GT> struct GSTraits;
template <> struct GSTraits<float> {
    static const int V = 4, W = 22, F = 23, P = 128, U = 4;
};
template <> struct GSTraits<u16> {
    static const int V = 8, W = 28, F = 15, P = 256, U = 4;
};

constexpr int ilog2(int x) { return x <= 1 ? 0 : 1 + ilog2(x / 2); }
static_assert(ilog2(GSTraits<float>::P * GSTraits<float>::V / 2) + GSTraits<float>::W + GSTraits<float>::F <= 53, "f32 window not exact");
static_assert(ilog2(GSTraits<u16>::P * GSTraits<u16>::V / 2) + GSTraits<u16>::W + GSTraits<u16>::F <= 53, "bf16 window not exact");
static_assert(GSTraits<float>::P % GSTraits<float>::U == 0 && GSTraits<u16>::P % GSTraits<u16>::U == 0, "P must be a multiple of U");

// Limbs is a thread's column of the block's shared limbs: limb k at
// p[k*GS_BLOCK] (consecutive threads hit consecutive words: no bank
// conflict whatever the limb).
struct Limbs {
    u64 *p;
    __device__ __forceinline__ u64 &operator[](int k) { return p[k * GS_BLOCK]; }

    // add adds v * 2^(bit-149) (v < 2^64, bit >= 0). Pieces at limb 9 and
    // beyond are zero for every sum the kernels form (all are below
    // 2^(288-149)); they are skipped, never written out of bounds.
    __device__ __forceinline__ void add(u64 v, int bit) {
        const int li = bit >> 5, s = bit & 31;
        const u64 lo = v << s, hi = s ? v >> (64 - s) : 0ull;
        (*this)[li] += lo & 0xffffffffu;
        if (li + 1 < LIMBS) (*this)[li + 1] += lo >> 32;
        if (hi && li + 2 < LIMBS) (*this)[li + 2] += hi;
    }

    // add_square adds the square of bits b (finite, nonzero) as
    // optimizer.AddSquare does.
    __device__ __forceinline__ void add_square(u32 b) {
        const u32 e = b >> 23;
        const u64 m = (b & 0x7fffffu) | (e ? 0x800000u : 0u);
        add(m, (int)(e ? e : 1) - 1);
    }

    // carry propagates carries so that limbs 0..7 lie in [0, 2^32).
    __device__ __forceinline__ void carry() {
#pragma unroll
        for (int k = 0; k < LIMBS - 1; k++) {
            const u64 c = (*this)[k] >> 32;
            (*this)[k] &= 0xffffffffu;
            (*this)[k + 1] += c;
        }
    }
};

// Window is a thread's state: the window [E, E+W) as float thresholds, its
// two accumulators, the non-finite count and the bookkeeping of the policy
// that moves it.
template <typename GT> struct Window {
    typedef GSTraits<GT> T;
    static const int H = 4;     // headroom above the square that moves the window
    static const int MISSES = 16; // squares below the window that move it down

    double acc0, acc1;
    float lo, hi;
    int e;       // E; 0 while the window is empty
    u32 hiBits;  // bits of hi
    int below;   // squares below the window this flush period
    u32 belowE;  // largest biased exponent among them
    u64 bad;

    __device__ __forceinline__ void init() {
        acc0 = acc1 = 0;
        lo = hi = 0.0f; // empty: no square q satisfies q < 0
        e = 0;
        hiBits = 0;
        below = 0;
        belowE = 0;
        bad = 0;
    }

    // in reports whether q goes to the accumulators (NaN never does).
    __device__ __forceinline__ bool in(float q) const { return q < hi && (q >= lo || q == 0.0f); }

    // flush adds the accumulators into l exactly (proof in the header).
    __device__ __forceinline__ void flush(Limbs &l) {
        // u = 2^(e-127-F) = 2^(bit-149); the accumulators are v*u, v < 2^53.
        const int x = e - 127 - T::F;
        const double inv = __longlong_as_double((long long)(1023 - x) << 52); // 2^-x
        const int bit = x + 149;
        if (acc0 != 0) l.add(__double2ull_rn(__dmul_rn(acc0, inv)), bit);
        if (acc1 != 0) l.add(__double2ull_rn(__dmul_rn(acc1, inv)), bit);
        acc0 = acc1 = 0;
    }

    // move flushes, then sets the window to end H exponents above biased
    // exponent top.
    __device__ __forceinline__ void move(Limbs &l, int top) {
        flush(l);
        e = min(max(top + H - T::W, 1), 254);
        lo = __uint_as_float((u32)e << 23);
        hiBits = e + T::W >= 255 ? 0x7f800000u : (u32)(e + T::W) << 23;
        hi = __uint_as_float(hiBits);
        below = 0;
        belowE = 0;
    }

    // miss takes a square that is not in the window: counted if not finite,
    // else added by the integer path; it may move the window.
    __device__ __forceinline__ void miss(Limbs &l, u32 b) {
        const u32 be = b >> 23 & 0xff;
        if (be == 0xff) {
            bad++;
            return;
        }
        if (b == 0) return;
        l.add_square(b);
        if (b >= hiBits) {
            move(l, (int)be);
        } else {
            belowE = max(belowE, be);
            if (++below >= MISSES) move(l, (int)belowE);
        }
    }

    // period ends a flush period: accumulators and limb carries.
    __device__ __forceinline__ void period(Limbs &l) {
        flush(l);
        l.carry();
        below = 0;
        belowE = 0;
    }
};

// ldv loads 16 bytes that are read once (not kept in L1).
__device__ __forceinline__ uint4 ldv(const uint4 *p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

__device__ __forceinline__ u32 word(const uint4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// elem returns element j of a vector as float32.
__device__ __forceinline__ float elem(float *, const uint4 &v, int j) { return __uint_as_float(word(v, j)); }
__device__ __forceinline__ float elem(u16 *, const uint4 &v, int j) {
    const u32 w = word(v, j >> 1);
    return __uint_as_float(j & 1 ? w & 0xffff0000u : w << 16);
}

// square is fl32(x*x) (the multiplication is never fused: --fmad=false).
__device__ __forceinline__ float square(float x) { return __fmul_rn(x, x); }

// add_if adds q (converted exactly to float64) to acc when q is in the
// window [lo, hi), else 0, and sets bit in miss when q was not added and is
// not 0 (NaN included). Selecting the addend keeps it to one select and one
// unconditional addition.
__device__ __forceinline__ void add_if(double &acc, u32 &miss, u32 bit, float q, float lo, float hi) {
    const float a = q >= lo && q < hi ? q : 0.0f;
    acc += (double)a;
    if (q != a) miss |= bit;
}

// fast adds the in-window squares of vector v (the k-th of an iteration) to
// the accumulators and sets the bits k*V+j of miss of the others.
template <typename GT> __device__ __forceinline__ void fast(Window<GT> &w, u32 &miss, const uint4 &v, int k) {
    const int V = GSTraits<GT>::V;
#pragma unroll
    for (int j = 0; j < V; j++) add_if(j & 1 ? w.acc1 : w.acc0, miss, 1u << (k * V + j), square(elem((GT *)0, v, j)), w.lo, w.hi);
}

// pick returns vector k of v (selects, so that v stays in registers).
template <int U> __device__ __forceinline__ uint4 pick(const uint4 (&v)[U], int k) {
    uint4 r = v[0];
#pragma unroll
    for (int i = 1; i < U; i++)
        if (k == i) r = v[i];
    return r;
}

// slow sends the squares of v that miss names through Window.miss.
template <typename GT, int U> __device__ __forceinline__ void slow(Window<GT> &w, Limbs &l, const uint4 (&v)[U], u32 miss) {
    const int V = GSTraits<GT>::V;
    while (miss) {
        const int j = __ffs(miss) - 1;
        miss &= miss - 1;
        w.miss(l, __float_as_uint(square(elem((GT *)0, pick(v, j / V), j % V))));
    }
}

// scalar sends element g[i] through the integer path.
template <typename GT> __device__ __forceinline__ void scalar(Window<GT> &w, Limbs &l, const GT *g, u64 i) {
    uint4 v;
    v.x = sizeof(GT) == 4 ? *(const u32 *)(g + i) : (u32)*(const u16 *)(g + i);
    const u32 b = __float_as_uint(square(elem((GT *)0, v, 0)));
    if ((b >> 23 & 0xff) == 0xff) w.bad++;
    else if (b) l.add_square(b);
}

// block_add adds the threads' limbs and non-finite counts of the block into
// stats. Every thread of the block calls it.
__device__ __forceinline__ void block_add(long long *stats, Limbs &l, u64 bad) {
    __shared__ u64 warp_sum[LIMBS + 1][GS_BLOCK / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k <= LIMBS; k++) {
        u64 x = k < LIMBS ? l[k] : bad;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
        if (lane == 0) warp_sum[k][warp] = x;
    }
    __syncthreads();
    if (threadIdx.x <= LIMBS) {
        u64 s = 0;
#pragma unroll
        for (int i = 0; i < GS_BLOCK / 32; i++) s += warp_sum[threadIdx.x][i];
        if (s) atomicAdd(reinterpret_cast<unsigned long long *>(stats) + threadIdx.x, (unsigned long long)s);
    }
}

template <typename GT>
__device__ __forceinline__ void grad_stats_kernel(long long *stats, const GT *__restrict__ g, u64 n) {
    typedef GSTraits<GT> T;
    __shared__ u64 sh[LIMBS * GS_BLOCK];
    if (blockDim.x != GS_BLOCK) __trap();
    Limbs l{sh + threadIdx.x};
#pragma unroll
    for (int k = 0; k < LIMBS; k++) l[k] = 0;
    Window<GT> w;
    w.init();
    const u64 t = thread_index(), stride = grid_stride();

    // Head and tail: the elements outside the aligned vectors.
    u64 head = ((16 - ((u64)g & 15)) & 15) / sizeof(GT);
    head = head < n ? head : n;
    const u64 nv = (n - head) / T::V, tail = head + nv * T::V;
    if (t < head) scalar(w, l, g, t);
    if (t < n - tail) scalar(w, l, g, tail + t);

    const uint4 *gv = reinterpret_cast<const uint4 *>(g + head);
    // Start with the window on the thread's first square (else the whole
    // first iteration would miss the empty window).
    if (t < nv) {
        const u32 b = __float_as_uint(square(elem((GT *)0, ldv(gv + t), 0)));
        if (b != 0 && (b >> 23 & 0xff) != 0xff) w.move(l, (int)(b >> 23));
    }
    int vecs = 0; // vectors since the last period
    for (u64 i = t; i < nv; i += T::U * stride) {
        uint4 v[T::U];
        const uint4 *p = gv + i;
#pragma unroll
        for (int k = 0; k < T::U; k++) v[k] = i + k * stride < nv ? ldv(p + k * stride) : make_uint4(0, 0, 0, 0);
        u32 miss = 0;
#pragma unroll
        for (int k = 0; k < T::U; k++) fast(w, miss, v[k], k);
        if (miss) slow(w, l, v, miss);
        vecs += T::U;
        if (vecs == T::P) {
            w.period(l);
            vecs = 0;
        }
    }
    w.period(l);
    block_add(stats, l, w.bad);
}

// The first kernels (baseline of the benchmarks): each thread adds its
// squares into a window of three 32-bit limbs L, L+1, L+2 kept in registers
// (an element's 56-bit term spans limbs li and li+1); an element outside the
// window flushes it into acc by predicated adds over the unrolled limbs and
// moves the window to its own limb.
__device__ __forceinline__ void v1_flush(u64 acc[LIMBS + 1], int L, u64 w0, u64 w1, u64 w2) {
#pragma unroll
    for (int k = 0; k < LIMBS; k++)
        acc[k] += (k == L ? w0 : 0ull) + (k == L + 1 ? w1 : 0ull) + (k == L + 2 ? w2 : 0ull);
}

__device__ __forceinline__ float ld_grad(const float *g, u64 i) { return g[i]; }
__device__ __forceinline__ float ld_grad(const u16 *g, u64 i) { return bf16_to_f32(g[i]); }

template <typename GT> __device__ void grad_stats_v1_kernel(long long *stats, const GT *__restrict__ g, u64 n) {
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
            v1_flush(acc, L, w0, w1, w2);
            L = li;
            w0 = lo;
            w1 = hi;
            w2 = 0;
        }
    }
    v1_flush(acc, L, w0, w1, w2);
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
__global__ void __launch_bounds__(GS_BLOCK, 4) grad_stats_f32(long long *stats, const float *g, u64 n) { grad_stats_kernel(stats, g, n); }
__global__ void __launch_bounds__(GS_BLOCK, 4) grad_stats_bf16(long long *stats, const u16 *g, u64 n) { grad_stats_kernel(stats, g, n); }
__global__ void grad_stats_v1_f32(long long *stats, const float *g, u64 n) { grad_stats_v1_kernel(stats, g, n); }
__global__ void grad_stats_v1_bf16(long long *stats, const u16 *g, u64 n) { grad_stats_v1_kernel(stats, g, n); }

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
