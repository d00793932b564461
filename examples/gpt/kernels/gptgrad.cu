// gptgrad.cu: bfloat16 gradient views of examples/gpt's decoder. The GPU
// model sums the gradients of its small parameters (biases, LayerNorms,
// embeddings) in float32, as for float32 views, then adds each sum into
// the parameter's bfloat16 view with one rounding (gpumodel.Options.GradType).
#include "gpt.cuh"

using namespace distopt;

// ACC_LIST: the gradients one launch of gpt_grad_accumulate_bf16 takes.
#define ACC_LIST 8
#define ACC_PARAMS(j) u16 *dst##j, const float *src##j, u64 n##j
#define ACC_PICK(j)                                                                                                    \
    case j:                                                                                                            \
        dst = dst##j, src = src##j, n = n##j;                                                                          \
        break;

// gpt_grad_accumulate_bf16: for each of its ACC_LIST (dst, src, n) triples,
// dst[i] = bf16(f32(dst[i]) + src[i]) for i < n (n may be 0), dst bfloat16,
// src float32: the float32 sum of the widened view and the new gradient,
// rounded to nearest even by cvt.rn.bf16.f32 (overflow to +-Inf, NaN to
// 0x7fff). Row y of the grid takes triple y; its blocks stride over it. One
// launch for the small parameters of a whole layer.
extern "C" __global__ void gpt_grad_accumulate_bf16(ACC_PARAMS(0), ACC_PARAMS(1), ACC_PARAMS(2), ACC_PARAMS(3),
                                                    ACC_PARAMS(4), ACC_PARAMS(5), ACC_PARAMS(6), ACC_PARAMS(7)) {
    u16 *dst = nullptr;
    const float *src = nullptr;
    u64 n = 0;
    switch (blockIdx.y) {
        ACC_PICK(0)
        ACC_PICK(1)
        ACC_PICK(2)
        ACC_PICK(3)
        ACC_PICK(4)
        ACC_PICK(5)
        ACC_PICK(6)
        ACC_PICK(7)
    }
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride)
        dst[e] = (u16)bf16_rn(bf16_to_f32(dst[e]) + src[e]);
}
