// gptgrad.cu: bfloat16 gradient views of examples/gpt's decoder. The GPU
// model sums the gradients of its small parameters (biases, LayerNorms,
// embeddings) in float32, as for float32 views, then adds each sum into
// the parameter's bfloat16 view with one rounding (gpumodel.Options.GradType).
#include "gpt.cuh"

using namespace distopt;

// gpt_grad_accumulate_bf16: dst[i] = bf16(f32(dst[i]) + src[i]) for i < n,
// dst bfloat16, src float32: the float32 sum of the widened view and the
// new gradient, rounded to nearest even by cvt.rn.bf16.f32 (overflow to
// +-Inf, NaN to 0x7fff).
extern "C" __global__ void gpt_grad_accumulate_bf16(u16 *dst, const float *src, u64 n) {
    for (u64 e = thread_index(); e < n; e += grid_stride()) dst[e] = (u16)bf16_rn(bf16_to_f32(dst[e]) + src[e]);
}
