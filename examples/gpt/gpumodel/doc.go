// Package gpumodel runs the model of examples/gpt/model on one GPU, reading
// the parameters where the optimizer gathered them and writing the
// gradients into its gradient views.
//
// # Linear layers
//
// The four linear layers of a block are gemm.Linear layers over float32
// activations: each quantizes its input (E4M3) and keeps only that FP8
// copy for backward, reads the weight in place as gathered (gemm.Weight),
// quantizes the output gradient (E5M2) and accumulates the weight
// gradient straight into the optimizer's float32 buffer (gemm.Gradient).
// The activations' scaling follows the optimizer's recipe of the weights
// (ActivationRecipes): per-tensor current scaling for per-tensor weights
// (current or delayed), 1x128 blocks for 128x128 weight tiles, and gemm's
// dequantizing fallback for 1x128 and MXFP8 weights. The biases are added
// and reduced by the kernels of examples/gpt/kernels/gpt.cu, as are the
// embeddings, LayerNorms, GELU, attention, the tied output head (the
// float32 LayerNorm output times the bfloat16 embedding, accumulated in
// float32; Options.Head HeadBF16 rounds its input, logits and gradients
// to bfloat16 as PyTorch's autocast does) and the cross-entropy.
//
// # Memory
//
// Between Forward and Backward each block keeps only what Backward reads:
// the FP8 linear inputs (held by the gemm.Linears), the residual stream x
// and x2 and the LayerNorms' mean and rstd in float32, the outputs of the
// qkv and fc layers (attention's and GELU's inputs) in bfloat16 as
// PyTorch's autocast keeps them (each the float32 product plus the bias,
// rounded once: kernels.GPTBiasAddBF16; model.CPU.BF16 rounds the
// reference at the same points), and what attention needs: by
// default (Options.Attention AttentionFlash, the fused kernels of
// examples/gpt/kernels/flash.cu) the bfloat16 attention output and a float32
// logsumexp per row, 32.5 MiB per layer at the 1.3B shape; with
// AttentionGEMM (TF32 GEMMs, any head width) the float32 probabilities,
// 1 GiB per layer there. At that shape a layer keeps 496.6 MiB (720.6 with
// qkv and fc in float32). The LayerNorm, attention and GELU outputs live
// in float32 buffers shared by all blocks, as do the gradients. Options.Recompute drops the FP8 copies of
// the LayerNorm and GELU outputs too and recomputes them in Backward (the
// same bits); Options.KeepTransposed keeps the transposed FP8 inputs
// instead of transposing in Backward (the same bits). PredictMemory
// predicts it all from the shapes and Model.Memory compares the
// prediction with what was allocated, by category.
//
// # Determinism
//
// Every kernel sums in a fixed order and gemm takes cuBLASLt's first
// heuristic choice for each product shape (unless gemm.Engine.SetAutotune
// is used, which times candidates and may pick differently from run to
// run): the same inputs give the same bits in every process on the same
// GPU model, driver and cuBLASLt.
//
// Requirements on the optimizer's configuration: high-precision parameters
// gathered in bfloat16, gradients in float32 (the kernels accumulate into
// them).
package gpumodel
