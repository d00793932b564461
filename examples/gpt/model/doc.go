// Package model describes the GPT-2 style decoder of examples/gpt and
// holds its CPU reference: the forward and backward passes in float64,
// one function per operation, which the GPU kernels are tested against.
//
// # The model
//
// Pre-LayerNorm blocks x += Attn(LN1(x)); x += MLP(LN2(x)), causal
// multi-head attention with a fused QKV projection, a GELU MLP (GPT-2's
// tanh approximation), learned position embeddings, a final LayerNorm and
// an output head tied to the token embedding; the loss is the mean softmax
// cross-entropy over all tokens. Linear layers compute y = x·Wᵀ + b with W
// row-major [out, in] (PyTorch's nn.Linear layout, and the layout the FP8
// GEMMs of package gemm read).
//
// # Precision of the parameters
//
// Every linear layer's weight (QKV, attention output, MLP up and down) is
// an FP8 parameter: gathered in FP8 and read by the FP8 GEMMs. LayerNorm
// weights and biases and the linear biases are HighPrecision (gathered in
// BF16), without weight decay. The token embedding, tied to the output
// head, is HighPrecision too: it is read two ways (rows looked up by token,
// and as the head's matrix), rarely seen tokens would share a per-tensor
// FP8 scale with frequent ones, and the head's logits feed the softmax
// directly, which is where low precision hurts most (Transformer Engine
// and DeepSeek-V3 also keep the embedding and output head in higher
// precision). With the byte-level vocabulary it is 256 x hidden, so the
// cost is negligible. The position embedding is a lookup table as well and
// is also HighPrecision. Weight decay applies to the matrices and the
// embeddings (nanoGPT's rule: tensors of two dimensions).
package model
