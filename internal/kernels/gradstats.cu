// gradstats.cu: the gradient statistics of optimizer.AddSquare: the exact
// fixed-point sum of the float32 squares q = fl32(x*x) of gradients in
// NormLimbs (9) 32-bit limbs, limb k counting units of 2^(32k-149), and the
// count of elements whose value or square is not finite, added into
// stats[0..9] (int64); grad_stats_normalize, launched after, propagates the
// carries as optimizer.Normalize does. grad_stats_{f32,bf16} read one
// gradient, grad_stats_table_{f32,bf16} every segment of a device table of
// (pointer, count) in one launch (the threads deal the 16-byte vectors of
// all segments as one sequence, so the work is even whatever the sizes).
//
// # Common frame
//
// Each thread reads its elements 16 bytes at a time (a grid-stride loop over
// aligned vectors, U per iteration; the < 8 elements before the first
// 16-byte boundary of a segment and after its last one go through the
// integer path below) and keeps a window of exponents with two float64
// accumulators (even elements to one, odd to the other). The integer path
// adds a square as optimizer.AddSquare adds it (m << pos%32 over limbs
// pos/32 and pos/32+1) into the thread's own unsigned 64-bit limbs in shared
// memory, or counts it when not finite. A flush adds an accumulator, an
// integer number v < 2^53 of units u (below), converted exactly (a scaling
// by a power of two and a conversion of an integer-valued float64), at its
// bit position into the limbs. Every P vectors a period ends: a flush and a
// propagation of the limbs' carries. The window follows the data: it starts
// on the thread's first element; an element above it moves it to end H
// exponents above that element; 16 elements below it within one period move
// it to end H above the largest of them. Where the window is never changes
// what is added, only how often the integer path runs. At the end each
// thread propagates its limbs' carries (limbs 0..7 then lie in [0, 2^32)), a
// warp then a block add them (shuffles, shared memory), and one thread per
// limb adds the block's sum into stats with a 64-bit atomic (two's-
// complement addition: exactly the int64 sum).
//
// The integer path is exact: it adds pieces below 2^32 into unsigned 64-bit
// limbs; a period adds at most 8 pieces per element (2 for its square, 6 for
// a flush of the window it moves) to a limb, and every period ends by
// propagating carries, so no limb wraps; after the last period limbs 0..7
// are below 2^32 and a block's sums below 2^40. Pieces at limb 9 and beyond
// would stand for 2^288 units: every sum formed is below 2^(10+128+149), so
// they are zero (and skipped). Hence, once every accumulator addition is
// shown exact (below), each thread's limbs hold exactly the integer sum of
// its squares (in units of 2^-149), each block's atomics add exactly that
// into stats, and after grad_stats_normalize stats holds the unique
// normalised form (limbs 0..7 in [0, 2^32)) of the exact sum: the same
// integer, thus the same bits, for any grid, any order of the atomics, any
// split of the gradients over calls, segments or ranks, and as the CPU
// reference computes it. The non-finite count is an integer count, exact
// likewise.
//
// # float32 gradients (window of squares)
//
// The window is [E, E+W) on the exponent of the square q: a square with
// 2^(E-127) <= q < 2^(E+W-127), or q = 0, is converted to float64 and added
// to an accumulator; every other square goes to the integer path (it moves
// the window as said). Let u = 2^(E-150). (1) Every square in the window is
// a multiple of u: a float32 square of biased exponent e >= E (E >= 1: no
// subnormal is in the window) is a multiple of its ulp 2^(e-150) >= u; zero
// is a multiple of anything. (2) Every square in the window is below
// 2^(W+23)*u, and an accumulator receives at most C = P*V/2 squares between
// flushes (V = 4 elements per vector). With W = 22, P = 128 (C = 2^8),
// log2(C) + W + 23 = 53, so every partial sum is an integer multiple of u
// below 2^53*u: a float64 represents it exactly (u >= 2^-149 is far above
// float64's smallest normal), hence every float64 addition is exact, and the
// flushed v < 2^53 is exactly the sum of the squares added.
//
// # bfloat16 gradients (window of values, checked after the fact)
//
// The window is a lowest exponent A of the value x, A in [64, 171]. An
// element x = s*2^(e-134) (e its biased exponent, s < 2^8 an integer) is
// taken to float64 without a conversion instruction: d = the float64 whose
// high word is (bits & 0x7fff) << 13 and low word 0, which is x*2^-896
// exactly for a normal x and 0 for x = 0; the fast path adds
// p = d * (d*2^1023) = x^2*2^-769 (one multiplication by a power of two,
// exact, and one fused multiply-add) for all 8*U elements of an iteration,
// with no test per element, and detects afterwards whether that was exact:
// the iteration is kept when (a) no element is nonzero with e < A (bit 15
// of each half of (m + 0x7fff7fff) & ~(m + (0x8000 - A*128)*0x10001), m the
// magnitudes, two per 32-bit word, is that test) and (b) each accumulator
// ends below B = 2^53*u', u' = 2^(2A-268-769). Otherwise the accumulators
// are restored to their values before the iteration and its elements go one
// by one through the slow path: an element with A <= e < A+14 is added as
// above, any other nonzero one goes to the integer path as fl32(x*x). Why a
// kept iteration added exactly: by (a) every product is x^2*2^-769 with
// e >= A or 0, a multiple of u' (x^2 = s^2*2^(2e-268)); an element with
// e >= 191 (its float32 square overflows or is not finite, Inf and NaN
// included: d is then still a finite float64) has p >= 2^(128-769) >= B
// (A <= 171), which by (b) did not happen, so every element added has
// e <= 190 and x*x is exact in float32 (at most 16 significant bits,
// 2^-126 <= x^2 < 2^128): p is exactly its float32 square times 2^-769.
// The exact partial sums are multiples of u' and increase; if one reached
// 2^53*u' the first such would round to a float64 >= 2^53*u' (rounding is
// monotone and 2^53*u' is a float64) and so would every later one,
// contradicting (b); below 2^53*u' every multiple of u' >= 2^-909 is a
// float64, so every addition was exact. The slow path keeps exactness by
// bounds: an iteration starts with each accumulator below B/2 (after any
// iteration an accumulator at or above B/2 is flushed), and adds at most
// 4*U products below 2^(16+26)*u' each (e < A+14), so it stays below
// 2^52*u' + 2^47*u' < B. The flush takes v = acc*2^(1037-2A), an integer
// below 2^53, at bit 2A-119 of the limbs.
//
// The kernels must be launched with GS_BLOCK threads per block (they trap
// otherwise). grad_stats_v1_* are the first kernels (a 3-limb integer
// window per thread, one element at a time), kept only as the benchmarks'
// baseline and the tests' second GPU implementation. Each kernel is built
// in the configuration (U vectors per iteration, and prefetch: the next
// iteration's loads issued before the current one is added) named by a
// suffix that the Go launcher uses (gradStatsConfig).
#include "bf16.cuh"

using namespace distopt;

static const int LIMBS = 9;
static const int GS_BLOCK = 256;

// Traits of a gradient type: V elements per 16-byte vector, flush period P
// (vectors); for float32 the window width W (exponents of the square) and
// F such that u = 2^(E-127-F). The exactness bound log2(P*V/2)+W+F <= 53 is
// checked at compile time.
template <typename GT> struct GSTraits;
template <> struct GSTraits<float> {
    static const int V = 4, W = 22, F = 23, P = 128;
};
template <> struct GSTraits<u16> {
    static const int V = 8, P = 256;
};

__host__ __device__ constexpr int ilog2(int x) { return x <= 1 ? 0 : 1 + ilog2(x / 2); }
static_assert(ilog2(GSTraits<float>::P * GSTraits<float>::V / 2) + GSTraits<float>::W + GSTraits<float>::F <= 53, "f32 window not exact");

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


// ldv loads 16 bytes that are read once (not kept in L1).
__device__ __forceinline__ uint4 ldv(const uint4 *p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

__device__ __forceinline__ u32 word(const uint4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// square is fl32(x*x) (the multiplication is never fused: --fmad=false).
__device__ __forceinline__ float square(float x) { return __fmul_rn(x, x); }

// pick returns vector k of v (selects, so that v stays in registers).
template <int U> __device__ __forceinline__ uint4 pick(const uint4 (&v)[U], int k) {
    uint4 r = v[0];
#pragma unroll
    for (int i = 1; i < U; i++)
        if (k == i) r = v[i];
    return r;
}

// integer_path adds the float32 square of bits b to l, or counts it in bad
// when it is not finite.
__device__ __forceinline__ void integer_path(Limbs &l, u64 &bad, u32 b) {
    if ((b >> 23 & 0xff) == 0xff) bad++;
    else if (b) l.add_square(b);
}

// WindowF is a thread's state for float32 gradients: the window [E, E+W) of
// squares as float thresholds, its two accumulators, the non-finite count
// and the bookkeeping of the policy that moves it.
struct WindowF {
    typedef float GT;
    static const int V = GSTraits<float>::V, P = GSTraits<float>::P;
    static const int F = 23, W = 22;
    static const int H = 4;       // headroom above the square that moves the window
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

    // flush adds the accumulators into l exactly (proof in the header).
    __device__ __forceinline__ void flush(Limbs &l) {
        // u = 2^(e-127-F) = 2^(bit-149); the accumulators are v*u, v < 2^53.
        const int x = e - 127 - F;
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
        e = min(max(top + H - W, 1), 254);
        lo = __uint_as_float((u32)e << 23);
        hiBits = e + W >= 255 ? 0x7f800000u : (u32)(e + W) << 23;
        hi = __uint_as_float(hiBits);
        below = 0;
        belowE = 0;
    }

    // start sets the window on the first element of a thread's first vector.
    __device__ __forceinline__ void start(Limbs &l, const uint4 &v) {
        const u32 b = __float_as_uint(square(__uint_as_float(v.x)));
        if (b != 0 && (b >> 23 & 0xff) != 0xff) move(l, (int)(b >> 23));
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

    // add_if adds q (converted exactly to float64) to acc when q is in the
    // window [lo, hi), else 0, and sets bit in miss when q was not added and
    // is not 0 (NaN included). Selecting the addend keeps it to one select
    // and one unconditional addition.
    __device__ __forceinline__ void add_if(double &acc, u32 &miss, u32 bit, float q) {
        const float a = q >= lo && q < hi ? q : 0.0f;
        acc += (double)a;
        if (q != a) miss |= bit;
    }

    // iteration adds the squares of the U vectors of v: in-window ones by
    // add_if, the others (their bits in miss) by miss.
    template <int U> __device__ __forceinline__ void iteration(Limbs &l, const uint4 (&v)[U]) {
        u32 m = 0;
#pragma unroll
        for (int k = 0; k < U; k++)
#pragma unroll
            for (int j = 0; j < V; j++) add_if(j & 1 ? acc1 : acc0, m, 1u << (k * V + j), square(__uint_as_float(word(v[k], j))));
        while (m) {
            const int j = __ffs(m) - 1;
            m &= m - 1;
            miss(l, __float_as_uint(square(__uint_as_float(word(pick(v, j / V), j % V)))));
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

// BPolicy is how a bfloat16 window moves: after a move on an element of
// exponent top, A = top - OFF; the slow path adds elements with
// A <= e < A+WX by the accumulators, and moves the window up for one with
// e >= A+UP; with RETRY (for "reposition") an iteration the fast path
// refused first moves the window to its largest exponent (when that changes
// A and every square is finite), so that the slow path finds its elements
// in the window rather than moving it element by element. The bound of the
// header holds when the slow path's products stay below 2^(52-log2(4U)):
// 14 + 2*WX + log2(4U) <= 52 (checked in WindowB).
template <int OFF_, int WX_, int UP_, bool RETRY_> struct BPolicy {
    static const int OFF = OFF_, WX = WX_, UP = UP_;
    static const bool RETRY = RETRY_;
};
typedef BPolicy<11, 14, 14, false> BFirst; // the first policy: A two exponents of headroom above 14
typedef BPolicy<15, 17, 18, true> BRetry;  // four exponents lower, repositioned by the slow path

// WindowB is a thread's state for bfloat16 gradients: the lowest exponent A
// of the window, the tests' constants derived from it, two accumulators of
// x^2*2^-769, the non-finite count and the bookkeeping of the policy that
// moves the window (scheme and proof in the header).
template <typename Pol> struct WindowB {
    typedef u16 GT;
    static const int V = GSTraits<u16>::V, P = GSTraits<u16>::P;
    static const int MISSES = 16; // elements below the window that move it down
    static const int AMIN = 64, AMAX = 171;

    double acc0, acc1;
    double bound; // B = 2^53*u' = 2^(2A-984); DBL_MIN while empty
    u32 kl;       // (0x8000 - A*128)*0x10001; 0 while empty
    int a;        // A; 0 while the window is empty
    int below;
    u32 belowE;
    u64 bad;

    __device__ __forceinline__ void init() {
        acc0 = acc1 = 0;
        bound = __longlong_as_double(1ll << 52); // 2^-1022: an accumulator of zeros is below it
        kl = 0; // every nonzero element is below an empty window
        a = 0;
        below = 0;
        belowE = 0;
        bad = 0;
    }

    // value returns the float64 of bfloat16 magnitude bits placed at bits
    // 13..27 of hw: x*2^-896 (0 for x = 0).
    static __device__ __forceinline__ double value(u32 hw) { return __hiloint2double((int)hw, 0); }

    // fma_square adds d*(d*2^1023) to acc: x^2*2^-769 for d = value(x).
    static __device__ __forceinline__ void fma_square(double &acc, double d) {
        acc = __fma_rn(d, __dmul_rn(d, __longlong_as_double(0x7fe0000000000000ll)), acc);
    }

    __device__ __forceinline__ void flush(Limbs &l) {
        if (a) {
            const double scale = __longlong_as_double((long long)(2060 - 2 * a) << 52); // 2^(1037-2A)
            const int bit = 2 * a - 119;
            if (acc0 != 0) l.add(__double2ull_rn(__dmul_rn(acc0, scale)), bit);
            if (acc1 != 0) l.add(__double2ull_rn(__dmul_rn(acc1, scale)), bit);
        }
        acc0 = acc1 = 0;
    }

    static __device__ __forceinline__ int bottom(int top) { return min(max(top - Pol::OFF, AMIN), AMAX); }

    // move flushes, then sets the window for an element of exponent top.
    __device__ __forceinline__ void move(Limbs &l, int top) {
        flush(l);
        a = bottom(top);
        kl = (0x8000u - ((u32)a << 7)) * 0x10001u;
        bound = __longlong_as_double((long long)(2 * a - 984 + 1023) << 52);
        below = 0;
        belowE = 0;
    }

    // start sets the window on the first element of a thread's first vector.
    __device__ __forceinline__ void start(Limbs &l, const uint4 &v) {
        const u32 e = v.x >> 7 & 0xff;
        if ((v.x & 0x7fff) != 0 && e != 0xff) move(l, (int)e);
    }

    // one adds element h through the slow path.
    __device__ __forceinline__ void one(Limbs &l, double &acc, u32 h) {
        const u32 m = h & 0x7fff;
        if (m == 0) return;
        const int e = (int)(m >> 7);
        if (a && e >= a && e < a + Pol::WX) {
            fma_square(acc, value(m << 13));
            return;
        }
        const u32 b = __float_as_uint(square(bf16_to_f32(h)));
        if ((b >> 23 & 0xff) == 0xff) {
            bad++;
            return;
        }
        if (b) l.add_square(b);
        if (e >= a + Pol::UP) {
            move(l, e);
        } else {
            belowE = max(belowE, (u32)e);
            if (++below >= MISSES) move(l, (int)belowE);
        }
    }

    // top returns the largest exponent among the elements of v.
    template <int U> static __device__ __forceinline__ u32 top(const uint4 (&v)[U]) {
        u32 t = 0;
#pragma unroll
        for (int k = 0; k < U; k++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const u32 w = word(v[k], i);
                t = max(t, max(w >> 7 & 0xff, w >> 23 & 0xff));
            }
        return t;
    }

    // iteration adds every element of v by the accumulators and keeps that
    // when it was exact (tests (a) and (b) of the header); else it restores
    // the accumulators and sends the elements through the slow path (after
    // a move of the window with RETRY).
    template <int U> __device__ __forceinline__ void iteration(Limbs &l, const uint4 (&v)[U]) {
        static_assert(14 + 2 * Pol::WX + ilog2(4 * U) <= 52, "bfloat16 slow path not exact");
        const double s0 = acc0, s1 = acc1;
        u32 low = 0;
#pragma unroll
        for (int k = 0; k < U; k++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const u32 w = word(v[k], i), m = w & 0x7fff7fffu;
                low |= (m + 0x7fff7fffu) & ~(m + kl);
                fma_square(acc0, value(w << 13 & 0x0fffe000u));
                fma_square(acc1, value(w >> 3 & 0x0fffe000u));
            }
        if (!(low & 0x80008000u) && acc0 < bound && acc1 < bound) {
            if (acc0 >= 0.5 * bound || acc1 >= 0.5 * bound) flush(l);
            return;
        }
        acc0 = s0;
        acc1 = s1;
        if (Pol::RETRY) {
            const u32 t = top(v);
            if (t != 0 && t <= 190 && bottom((int)t) != a) move(l, (int)t);
        }
#pragma unroll 1
        for (int j = 0; j < 4 * U; j++) {
            const u32 w = word(pick(v, j >> 2), j & 3);
            one(l, acc0, w & 0xffff);
            one(l, acc1, w >> 16);
        }
        if (acc0 >= 0.5 * bound || acc1 >= 0.5 * bound) flush(l);
    }

    __device__ __forceinline__ void period(Limbs &l) {
        flush(l);
        l.carry();
        below = 0;
        belowE = 0;
    }
};

// scalar sends element g[i] through the integer path.
__device__ __forceinline__ void scalar(Limbs &l, u64 &bad, const float *g, u64 i) { integer_path(l, bad, __float_as_uint(square(g[i]))); }
__device__ __forceinline__ void scalar(Limbs &l, u64 &bad, const u16 *g, u64 i) { integer_path(l, bad, __float_as_uint(square(bf16_to_f32(g[i])))); }

// Dealer deals a thread its vectors of consecutive segments: the vectors of
// all segments form one sequence, thread t taking those at t mod stride,
// U per iteration (at q, q+stride, ...), so the work stays even whatever the
// segments' sizes. vecs counts the vectors since the last period.
template <typename Win, int U, bool PF> struct Dealer {
    typedef typename Win::GT GT;
    u64 t, stride, base; // base: the vectors of the segments dealt so far
    int vecs;
    bool started;

    __device__ __forceinline__ void load(uint4 (&v)[U], const uint4 *gv, u64 i, u64 nv) const {
#pragma unroll
        for (int k = 0; k < U; k++) v[k] = i + k * stride < nv ? ldv(gv + i + k * stride) : make_uint4(0, 0, 0, 0);
    }

    __device__ __forceinline__ void step(Win &w, Limbs &l, const uint4 (&v)[U]) {
        w.template iteration<U>(l, v);
        vecs += U;
        if (vecs >= Win::P) {
            w.period(l);
            vecs = 0;
        }
    }

    // segment adds the n elements of g.
    __device__ __forceinline__ void segment(Win &w, Limbs &l, const GT *g, u64 n) {
        const int V = Win::V;
        u64 head = ((16 - ((u64)g & 15)) & 15) / sizeof(GT);
        head = head < n ? head : n;
        const u64 nv = (n - head) / V, tail = head + nv * V;
        // r: this thread's rank in the segment's sequence.
        const u64 r = (t + stride - base % stride) % stride;
        if (r < head) scalar(l, w.bad, g, r);
        if (r < n - tail) scalar(l, w.bad, g, tail + r);
        base += nv;
        if (r >= nv) return;
        const uint4 *gv = reinterpret_cast<const uint4 *>(g + head);
        uint4 v[U];
        load(v, gv, r, nv);
        if (!started) {
            w.start(l, v[0]);
            started = true;
        }
        for (u64 i = r;;) {
            const u64 next = i + U * stride;
            if (PF) {
                uint4 x[U];
                load(x, gv, next, nv);
                step(w, l, v);
#pragma unroll
                for (int k = 0; k < U; k++) v[k] = x[k];
            } else {
                step(w, l, v);
                if (next < nv) load(v, gv, next, nv);
            }
            if (next >= nv) break;
            i = next;
        }
    }
};

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


// GSSeg is an entry of a statistics table: n elements at g.
struct GSSeg {
    const void *g;
    u64 n;
};

// grad_stats_kernel adds the statistics of the nseg segments of segs, or of
// the n elements of g when segs is null.
template <typename Win, int U, bool PF>
__device__ __forceinline__ void grad_stats_kernel(long long *stats, const GSSeg *segs, int nseg, const typename Win::GT *g, u64 n) {
    typedef typename Win::GT GT;
    __shared__ u64 sh[LIMBS * GS_BLOCK];
    if (blockDim.x != GS_BLOCK) __trap();
    Limbs l{sh + threadIdx.x};
#pragma unroll
    for (int k = 0; k < LIMBS; k++) l[k] = 0;
    Win w;
    w.init();
    Dealer<Win, U, PF> d{thread_index(), grid_stride(), 0, 0, false};
    if (segs) {
        for (int s = 0; s < nseg; s++) d.segment(w, l, (const GT *)segs[s].g, segs[s].n);
    } else {
        d.segment(w, l, g, n);
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


// The configurations: suffix, U, prefetch, blocks per multiprocessor, bfloat16
// window policy.
#define GS_KERNELS(SUF, U, PF, BPM, POL)                                                                                                       \
    __global__ void __launch_bounds__(GS_BLOCK, BPM) grad_stats_f32##SUF(long long *stats, const float *g, u64 n) {                        \
        grad_stats_kernel<WindowF, U, PF>(stats, 0, 0, g, n);                                                                            \
    }                                                                                                                                    \
    __global__ void __launch_bounds__(GS_BLOCK, BPM) grad_stats_bf16##SUF(long long *stats, const u16 *g, u64 n) {                         \
        grad_stats_kernel<WindowB<POL>, U, PF>(stats, 0, 0, g, n);                                                                            \
    }                                                                                                                                    \
    __global__ void __launch_bounds__(GS_BLOCK, BPM) grad_stats_table_f32##SUF(long long *stats, const GSSeg *segs, int nseg) {            \
        grad_stats_kernel<WindowF, U, PF>(stats, segs, nseg, 0, 0);                                                                      \
    }                                                                                                                                    \
    __global__ void __launch_bounds__(GS_BLOCK, BPM) grad_stats_table_bf16##SUF(long long *stats, const GSSeg *segs, int nseg) {           \
        grad_stats_kernel<WindowB<POL>, U, PF>(stats, segs, nseg, 0, 0);                                                                      \
    }

extern "C" {
// The one configuration launched (gradstats.go). The others measured, built
// by adding their lines back: (_u4, 4, false, 4, BFirst), (_u2p, 2, true, 4,
// BFirst), (_u2r, 2, true, 4, BRetry).
GS_KERNELS(_u4r, 4, true, 4, BRetry)
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
