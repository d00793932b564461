// Package gpumodel runs the model of examples/gpt/model on one GPU. It reads
// the parameters where the optimizer gathered them. It writes the gradients
// into the optimizer's gradient views.
//
// # Use
//
// NewWith allocates a Model for micro-batches of batch x seq tokens. New does
// so with the default Options. For each micro-batch, Forward queues the
// forward pass and the loss, and Backward the backward pass. ZeroGrads clears
// the gradients before a step's first micro-batch. Loss and LossLater read
// the loss back. A Model is not safe for concurrent use.
//
// The optimizer must gather the high-precision parameters in bfloat16. Its
// gradients are float32, or bfloat16 with Options.GradType set to match.
//
// # Gradients
//
// Every gradient is accumulated into its view. With float32 views the
// kernels add into them directly. With bfloat16 views:
//
//   - each linear weight's GEMM adds its product into the view and rounds,
//     in its epilogue (gemm.Gradient). cuBLASLt was seen to round the
//     product to bfloat16 before adding it: from a zeroed view that is one
//     rounding, on later micro-batches two;
//   - the small parameters' gradients (biases, LayerNorms, embeddings) are
//     summed in float32 first, by the same kernels in the same order, into
//     a scratch the model owns (4 bytes per small parameter: 20.5 MiB at the
//     1.3B shape). Once a block of the backward (the head, a layer, the
//     embeddings) has queued their last writes, one kernel adds each sum
//     into its view and rounds to nearest even (kernels.GPTAccumulateBF16s).
//
// So one micro-batch from zeroed views gives bf16 of the float32 path's
// gradient, for the small parameters bit for bit. Each micro-batch rounds:
// accumulated micro-batches round their partial sums, which float32 views
// do not.
//
// Why a scratch, not kernels that read, add and round the bfloat16 view in
// place? The token embedding's gradient has two parts, the head's and the
// embedding's, far apart in Backward: in place it would be rounded twice
// per micro-batch. The scratch also leaves every gradient kernel as it is,
// so float32 views keep their bits. It costs 4 bytes per small parameter.
// At 1.3B that is 0.8% of what bfloat16 views save (2 bytes per parameter).
//
// # Linear layers
//
// The four linear layers of a block are gemm.Linear layers over float32
// activations. Each one:
//
//   - quantizes its input to E4M3 and keeps only that FP8 copy for Backward;
//   - reads the weight in place, as gathered (gemm.Weight);
//   - quantizes the output gradient to E5M2;
//   - accumulates the weight gradient into the optimizer's float32 or
//     bfloat16 buffer (gemm.Gradient).
//
// The activations are scaled to suit the weights' recipe, as
// ActivationRecipes says. The kernels of examples/gpt/kernels do the rest:
// biases, embeddings, LayerNorms, GELU, attention, the tied output head and
// the cross-entropy. Options.Head sets the precision of the head; under
// HeadBF16 its three products run on cuBLASLt's bfloat16 tensor cores
// (gemm.Dense) instead of the head kernels.
//
// By default the LayerNorms before qkv and fc, and GELU before mlp.proj,
// quantize those layers' inputs themselves (gemm.Linear.ForwardQuantized,
// fused.go): no float32 output is written and read back twice, and the
// bias and residual connection of attn.proj and mlp.proj join the
// LayerNorm after them. Options.Unfused, and Recompute, run the separate
// kernels instead. Both give the same bits.
//
// # Memory
//
// Between Forward and Backward, a block keeps only what Backward reads:
//
//   - the FP8 inputs of its linear layers, held by the gemm.Linears;
//   - the residual stream x and x2, and the LayerNorms' mean and rstd, in
//     float32;
//   - the outputs of the qkv and fc layers in bfloat16, as PyTorch's autocast
//     keeps them: the float32 product plus the bias, rounded once
//     (kernels.GPTBiasAddBF16);
//   - what attention needs. Flash attention, the default, keeps its bfloat16
//     output and a float32 logsumexp per row, as does AttentionCuDNN
//     (cuDNN's fused attention, package examples/gpt/cudnn).
//     AttentionGEMM keeps the float32 probabilities.
//
// The float64 reference, model.CPU with BF16 set, rounds at the same points.
// At the 1.3B shape a layer keeps 496.6 MiB. With qkv and fc in float32 it
// would keep 720.6 MiB. Attention's share is 32.5 MiB with flash attention,
// and 1 GiB with AttentionGEMM.
//
// The attention output, and when unfused the LayerNorm and GELU outputs,
// live in float32 buffers that all blocks share. AttentionCuDNN has no
// float32 attention output: attn.proj reads the kept bfloat16 one. So do the gradients. Options.Recompute recomputes the
// LayerNorm and GELU outputs in Backward, instead of keeping their FP8
// copies. Options.KeepTransposed keeps the transposed FP8 inputs, instead of
// transposing them in Backward. Both give the same bits.
//
// PredictMemory predicts all of this from the shapes. Model.Memory compares
// the prediction with what was allocated, by category.
//
// # Determinism
//
// Every kernel sums in a fixed order. gemm takes cuBLASLt's first heuristic
// choice for each product shape. So the same inputs give the same bits in
// every process on the same GPU model, driver and cuBLASLt. Two options
// break this: gemm.Engine.SetAutotune times candidates and may pick
// differently from run to run, and AttentionCuDNN's backward (cuDNN 9.14)
// gave a few different dq elements from run to run.
package gpumodel
