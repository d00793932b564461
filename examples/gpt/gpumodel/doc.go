// Package gpumodel runs the model of examples/gpt/model on one GPU, reading
// the parameters where the optimizer gathered them and writing the
// gradients into its gradient views.
//
// Linear layers use the FP8 GEMMs of package gemm: the layer's input is
// quantized to E4M3 with per-tensor current scaling (kept for the weight
// gradient), the weight is read in place as gathered (gemm.Weight), the
// output gradient is quantized to E5M2, and the weight gradient is
// accumulated straight into the optimizer's buffer (gemm.Gradient). The
// biases are added and reduced by the kernels of internal/kernels/gpt.cu,
// as are the embeddings, LayerNorms, GELU, attention, the tied output head
// (a bfloat16 product) and the cross-entropy. Activations are float32.
//
// Requirements on the optimizer's configuration: per-tensor FP8 recipes
// (current or delayed), high-precision parameters gathered in bfloat16,
// gradients in float32 (the kernels accumulate into them).
//
// Status: written against the documented APIs and checked on the CPU only
// for compiling; TestGPUModelMatchesCPU (loss and gradients against the
// float64 model on the same gathered weights) is the first thing to run on
// a GPU.
package gpumodel
