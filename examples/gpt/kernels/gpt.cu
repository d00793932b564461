// gpt.cu: the elementwise operations of a GPT-2 style decoder
// (examples/gpt) and the any-width versions of its row-wise kernels
// (LayerNorm, cross-entropy). Attention is in attention.cu.
// Row-wise kernels with the row in registers are in gptrows.cu, column
// reductions in gptcols.cu, the BF16 output head in gpthead.cu.
//
// Activations and gradients are float32 but for the linear outputs the
// model keeps for backward (qkv, fc), which are bfloat16 (gpt_bias_add_bf16
// writes them; the _bf16 GELU kernels read them); parameters read here
// (token and position embeddings, LayerNorm weights and biases, linear
// biases) are the optimizer's gathered high-precision copies in bfloat16. Every reduction
// runs in a fixed order (warp shuffles over a fixed lane assignment, or one
// thread looping over rows), so that results are the same from run to run.
// The reference computations are the float64 functions of
// examples/gpt/model named in each comment. Elementwise kernels take a
// float4 path when every pointer is 16-byte aligned (8 for bfloat16) and the
// row length is a multiple of 4, and a scalar one otherwise; both compute the
// same expression.
#include "gptbwd.cuh"
#include "gptnorm.cuh"

using namespace distopt;

// gpt_embed (model.Embed): x[r, i] = wte[tok[r], i] + wpe[r % seq, i] for
// r < rows, i < h. Grid-stride over rows, one block per row.
extern "C" __global__ void gpt_embed(float *x, const u16 *wte, const u16 *wpe, const int *tok, u64 rows,
                                     u64 seq, u64 h) {
    const bool vec = (h & 3) == 0 && aligned(x, 16) && aligned(wte, 8) && aligned(wpe, 8);
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const u16 *te = wte + (u64)tok[r] * h, *pe = wpe + (r % seq) * h;
        float *xr = x + r * h;
        if (vec) {
            for (u64 i = 4 * threadIdx.x; i < h; i += 4 * blockDim.x) {
                const float4 a = bf16x4(te + i), b = bf16x4(pe + i);
                *reinterpret_cast<float4 *>(xr + i) = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
            }
        } else {
            for (u64 i = threadIdx.x; i < h; i += blockDim.x) xr[i] = bf16_to_f32(te[i]) + bf16_to_f32(pe[i]);
        }
    }
}

// gpt_embed_grad_positions (model.EmbedBackward, position part):
// dwpe[t, i] += sum over b < batch, in order, of dx[b*seq + t, i].
extern "C" __global__ void gpt_embed_grad_positions(float *dwpe, const float *dx, u64 batch, u64 seq, u64 h) {
    const u64 n = seq * h;
    for (u64 e = thread_index(); e < n; e += grid_stride()) {
        float s = 0;
#pragma unroll 8
        for (u64 b = 0; b < batch; b++) s += dx[b * n + e];
        dwpe[e] += s;
    }
}

// gpt_layernorm (model.LayerNorm), one warp per row of n, the row read
// from memory in each pass (any n; gptrows.cu keeps rows of up to 2048 in
// registers): mean, rstd = 1/sqrt(var + eps) (biased variance) kept per
// row; y = (x-mean)*rstd*w + b.
extern "C" __global__ void gpt_layernorm(float *y, float *mean, float *rstd, const float *x, const u16 *w,
                                         const u16 *b, u64 rows, u64 n, float eps) {
    const u32 lane = threadIdx.x & 31;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        const float *xr = x + r * n;
        float m, rs;
        ln_stats_any(xr, lane, n, eps, m, rs);
        for (u64 i = lane; i < n; i += 32) y[r * n + i] = ln_out(xr[i], m, rs, bf16_to_f32(w[i]), bf16_to_f32(b[i]));
        if (lane == 0) {
            mean[r] = m;
            rstd[r] = rs;
        }
    }
}

// gpt_layernorm_grad_x (model.LayerNormBackward, dx part), one warp per
// row (any n): with xhat = (x-mean)*rstd and g = dy*w,
// dx += rstd*(g - mean(g) - xhat*mean(g*xhat)).
extern "C" __global__ void gpt_layernorm_grad_x(float *dx, const float *dy, const float *x, const float *mean,
                                                const float *rstd, const u16 *w, u64 rows, u64 n) {
    ln_grad_x_any<float, false>(dx, dy, x, mean, rstd, w, rows, n, nullptr);
}

// gpt_bias_add (bias of model.Linear): y[r, o] += b[o]. The float4 path
// also needs rows*n below 2^32 (32-bit column arithmetic).
extern "C" __global__ void gpt_bias_add(float *y, const u16 *b, u64 rows, u64 n) {
    if ((n & 3) == 0 && aligned(y, 16) && aligned(b, 8) && rows * n < (1ull << 32)) {
        const u32 n4 = (u32)(n >> 2);
        float4 *y4 = reinterpret_cast<float4 *>(y);
        for (u64 e = thread_index(); e < rows * n4; e += grid_stride()) {
            const float4 w = bf16x4(b + 4 * ((u32)e % n4));
            float4 v = y4[e];
            v.x += w.x;
            v.y += w.y;
            v.z += w.z;
            v.w += w.w;
            y4[e] = v;
        }
        return;
    }
    for (u64 e = thread_index(); e < rows * n; e += grid_stride()) y[e] += bf16_to_f32(b[e % n]);
}

// gpt_bias_residual (the bias of model.Linear, then the residual
// connection): y[r, o] = (y[r, o] + b[o]) + x[r, o], y and x float32, b
// bfloat16; the bits of gpt_bias_add followed by gpt_add in one pass. The
// float4 path also needs rows*n below 2^32.
extern "C" __global__ void gpt_bias_residual(float *y, const float *x, const u16 *b, u64 rows, u64 n) {
    if ((n & 3) == 0 && aligned(y, 16) && aligned(x, 16) && aligned(b, 8) && rows * n < (1ull << 32)) {
        const u32 n4 = (u32)(n >> 2);
        float4 *y4 = reinterpret_cast<float4 *>(y);
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        for (u64 e = thread_index(); e < rows * n4; e += grid_stride()) {
            y4[e] = residual4(y4[e], bf16x4(b + 4 * ((u32)e % n4)), x4[e]);
        }
        return;
    }
    for (u64 e = thread_index(); e < rows * n; e += grid_stride()) y[e] = residual(y[e], bf16_to_f32(b[e % n]), x[e]);
}

// gpt_bias_add_bf16 (model.Linear's bias, and the bfloat16 the model keeps
// of qkv and fc): y[r, o] = bf16(x[r, o] + b[o]), the float32 sum rounded
// to nearest even (model.RoundBF16 of the float32 sum), y bfloat16, x
// float32 (the GEMM's output), b bfloat16. Four elements per thread when n
// is a multiple of 4, x 16-byte and y, b 8-byte aligned and rows*n below
// 2^32.
extern "C" __global__ void gpt_bias_add_bf16(u16 *y, const float *x, const u16 *b, u64 rows, u64 n) {
    if ((n & 3) == 0 && aligned(y, 8) && aligned(x, 16) && aligned(b, 8) && rows * n < (1ull << 32)) {
        const u32 n4 = (u32)(n >> 2);
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        uint2 *y4 = reinterpret_cast<uint2 *>(y);
        for (u64 e = thread_index(); e < rows * n4; e += grid_stride()) {
            y4[e] = bias_bf16x4(x4[e], bf16x4(b + 4 * ((u32)e % n4)));
        }
        return;
    }
    for (u64 e = thread_index(); e < rows * n; e += grid_stride()) y[e] = (u16)bf16_rn(x[e] + bf16_to_f32(b[e % n]));
}

namespace {

// The elementwise maps: out = f(a, b) for each element.
struct AddOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// GeluOp (model.GELU): gelu of a.
struct GeluOp {
    __device__ __forceinline__ float operator()(float v, float) const { return gelu(v); }
};

// GeluGradOp (model.GELUBackward): dy*GELU'(x) for a = dy, b = x.
struct GeluGradOp {
    __device__ __forceinline__ float operator()(float dy, float v) const { return gelu_grad(dy, v); }
};

// Loads of one or four consecutive float32 or bfloat16 inputs (four: 16
// or 8 bytes, aligned), widened to float32.
__device__ __forceinline__ float ld1(const float *p) { return *p; }
__device__ __forceinline__ float ld1(const u16 *p) { return bf16_to_f32(*p); }
__device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 ld4(const u16 *p) { return bf16x4(p); }

// map2 sets y[i] = f(a[i], b[i]) for i < n, a and b float32 or bfloat16
// (widened); b may be null when f ignores it. y may be a or b when they
// are float32.
template <class A, class B, class F>
__device__ __forceinline__ void map2(float *y, const A *a, const B *b, u64 n, F f) {
    if ((n & 3) == 0 && aligned(y, 16) && aligned(a, 4 * sizeof(A)) && aligned(b, 4 * sizeof(B))) {
        float4 *y4 = reinterpret_cast<float4 *>(y);
        for (u64 i = thread_index(); i < n >> 2; i += grid_stride()) {
            const float4 u = ld4(a + 4 * i), v = b != nullptr ? ld4(b + 4 * i) : make_float4(0, 0, 0, 0);
            y4[i] = make_float4(f(u.x, v.x), f(u.y, v.y), f(u.z, v.z), f(u.w, v.w));
        }
        return;
    }
    for (u64 i = thread_index(); i < n; i += grid_stride()) y[i] = f(ld1(a + i), b != nullptr ? ld1(b + i) : 0.0f);
}

} // namespace

// gpt_add (the residual connection): y[i] = a[i] + b[i]; y may be a or b.
extern "C" __global__ void gpt_add(float *y, const float *a, const float *b, u64 n) { map2(y, a, b, n, AddOp()); }

// gpt_gelu (model.GELU): y = 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))).
extern "C" __global__ void gpt_gelu(float *y, const float *x, u64 n) {
    map2(y, x, (const float *)nullptr, n, GeluOp());
}

// gpt_gelu_bf16: gpt_gelu of a bfloat16 x (the model's kept fc), y float32.
extern "C" __global__ void gpt_gelu_bf16(float *y, const u16 *x, u64 n) {
    map2(y, x, (const float *)nullptr, n, GeluOp());
}

// gpt_gelu_grad (model.GELUBackward): dx = dy*GELU'(x).
extern "C" __global__ void gpt_gelu_grad(float *dx, const float *dy, const float *x, u64 n) {
    map2(dx, dy, x, n, GeluGradOp());
}

// gpt_gelu_grad_bf16: gpt_gelu_grad of a bfloat16 x (the model's kept fc);
// dx and dy float32.
extern "C" __global__ void gpt_gelu_grad_bf16(float *dx, const float *dy, const u16 *x, u64 n) {
    map2(dx, dy, x, n, GeluGradOp());
}

// gpt_cross_entropy (model.CrossEntropy and CrossEntropyBackward fused),
// one warp per row of v logits: loss[r] = log(sum exp(l - max)) + max -
// l[target[r]], and, when dlogits is not null,
// dlogits[r, i] = coef*(softmax(l)[i] - (i == target[r])). dlogits may be
// logits.
extern "C" __global__ void gpt_cross_entropy(float *loss, float *dlogits, const float *logits, const int *target,
                                             u64 rows, u64 v, float coef) {
    const u32 lane = threadIdx.x & 31;
    for (u64 r = warp_index(); r < rows; r += warp_stride()) {
        const float *lr = logits + r * v;
        float mx = -INFINITY;
        for (u64 i = lane; i < v; i += 32) mx = fmaxf(mx, lr[i]);
        mx = warp_max(mx);
        float sum = 0;
        for (u64 i = lane; i < v; i += 32) sum += expf(lr[i] - mx);
        sum = warp_sum(sum);
        const float tl = lr[target[r]];
        __syncwarp();
        if (lane == 0) loss[r] = logf(sum) + mx - tl;
        if (dlogits != nullptr) {
            const float inv = 1.0f / sum;
            for (u64 i = lane; i < v; i += 32)
                dlogits[r * v + i] = coef * (expf(lr[i] - mx) * inv - (i == (u64)target[r] ? 1.0f : 0.0f));
        }
    }
}

