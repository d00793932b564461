// Package model describes the GPT-2 style decoder of examples/gpt.
//
// It also holds the model's CPU reference: the forward and backward passes
// in float64, one function per operation. The GPU kernels are tested
// against it. Config.FlopsPerToken counts a step's work; Config.Floor is
// the step time a GPU of given rates cannot beat.
//
// # The model
//
// The blocks are pre-LayerNorm:
//
//	x += Attn(LN1(x))
//	x += MLP(LN2(x))
//
// Attention is causal and multi-head, with a fused QKV projection. The MLP
// uses GELU, in GPT-2's tanh approximation. Position embeddings are
// learned. A final LayerNorm follows the blocks. The output head is tied to
// the token embedding. The loss is the mean softmax cross-entropy over all
// tokens.
//
// Linear layers compute y = x·Wᵀ + b. W is row-major [out, in]. That is
// PyTorch's nn.Linear layout, and the layout the FP8 GEMMs of package gemm
// read.
//
// # Precision of the parameters
//
// Every linear layer's weight is an FP8 parameter: QKV, attention output,
// MLP up and MLP down. It is gathered in FP8 and read by the FP8 GEMMs.
//
// LayerNorm weights and biases and the linear biases are HighPrecision,
// gathered in BF16. They have no weight decay.
//
// The token embedding, tied to the output head, is HighPrecision too:
//
//   - it is read two ways, as rows looked up by token and as the head's
//     matrix;
//   - rarely seen tokens would share a per-tensor FP8 scale with frequent
//     ones;
//   - the head's logits feed the softmax directly, where low precision
//     hurts most.
//
// Transformer Engine and DeepSeek-V3 also keep the embedding and output
// head in higher precision. With the byte-level vocabulary the embedding is
// 256 × hidden, so the cost is negligible. The position embedding is a
// lookup table as well, and is also HighPrecision.
//
// Weight decay applies to the matrices and the embeddings. That is
// nanoGPT's rule: tensors of two dimensions.
package model
