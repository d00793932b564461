// stepctl.cu: the step's decision on the device, so that the host never
// reads the gradient statistics back (package optimizer's control block).
//
// step_control (one thread): backend.Control.Advance over stats (the
// all-reduced int64 limbs of the exact sum of squares, then the non-finite
// count): the sum rounded once to the nearest float64 (ties to even) as
// backend.SumOfSquaresNearest does it, then the norm, the loss scaler, the
// skip flag, the clip coefficient, the step count and the gradient scale,
// every operation a correctly rounded float64 one (__dsqrt_rn, __ddiv_rn,
// __dmul_rn, __dadd_rn) in the Go reference's order.
#include "stepctl.cuh"

using namespace distopt;

// LIMBS and WORDS: backend.NormLimbs, and the 32-bit words of the
// normalised sum (the last limb gives two).
#define LIMBS 9
#define WORDS (LIMBS + 1)

__device__ double sum_nearest(const long long *stats) {
    long long s[LIMBS];
    for (int i = 0; i < LIMBS; i++) s[i] = stats[i];
    for (int i = 0; i < LIMBS - 1; i++) { // backend.Normalize
        const long long c = s[i] >> 32;
        s[i] &= 0xffffffffll;
        s[i + 1] += c;
    }
    u32 w[WORDS];
    for (int i = 0; i < LIMBS; i++) w[i] = (u32)s[i];
    w[LIMBS] = (u32)((u64)s[LIMBS - 1] >> 32);
    int top = -1;
    for (int k = WORDS - 1; k >= 0 && top < 0; k--)
        if (w[k] != 0) top = 32 * k + 31 - __clz(w[k]);
    if (top < 0) return 0.0;
#define BIT(k) ((u64)(w[(k) / 32] >> ((k) % 32)) & 1ull)
    if (top < 53) {
        u64 m = 0;
        for (int k = top; k >= 0; k--) m = m << 1 | BIT(k);
        return ldexp((double)m, -149);
    }
    const int lo = top - 53;
    u64 m = 0;
    for (int k = top; k >= lo; k--) m = m << 1 | BIT(k);
    bool sticky = false;
    for (int k = 0; k < lo; k++) sticky = sticky || BIT(k) != 0;
#undef BIT
    const u64 round = m & 1;
    m >>= 1;
    if (round != 0 && (sticky || (m & 1) != 0)) m++;
    return ldexp((double)m, lo + 1 - 149);
}

extern "C" __global__ void step_control(StepCtl *c, const long long *stats) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    c->used = c->scale;
    c->norm = __ddiv_rn(__dsqrt_rn(sum_nearest(stats)), c->used);
    c->nonfinite = stats[LIMBS];
    const bool finite = c->nonfinite == 0;
    if (c->growth != 0) {
        if (!finite) {
            c->scale = fmax(__dmul_rn(c->scale, c->backoff), c->min_scale);
            c->good = 0;
        } else if (++c->good >= c->interval) {
            c->scale = fmin(__dmul_rn(c->scale, c->growth), c->max_scale);
            c->good = 0;
        }
    }
    c->clip = 1.0;
    if (!finite) {
        c->skip = 1;
        c->norm = __longlong_as_double(0x7ff0000000000000ll);
        c->gs = __double2float_rn(__ddiv_rn(1.0, c->used));
        return;
    }
    c->skip = 0;
    if (c->max_norm > 0) {
        const double q = __ddiv_rn(c->max_norm, __dadd_rn(c->norm, 1e-6));
        if (q < 1) c->clip = q;
    }
    c->step++;
    c->gs = __double2float_rn(__ddiv_rn(c->clip, c->used));
}
