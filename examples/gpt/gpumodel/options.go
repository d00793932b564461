package gpumodel

import (
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
)

// Options are the model's trades of memory against time. The zero value
// runs attention with the fused kernels, quantizes the linear layers'
// inputs in the LayerNorm and GELU kernels that produce them, and keeps
// every FP8 linear input once, transposing it in backward.
type Options struct {
	// Recipe is the FP8 recipe of the linear weights, the optimizer's
	// Config.Recipe; it picks the activations' scaling (ActivationRecipes).
	// Zero: read from the gathered weights at the first Forward. Forward
	// refuses weights of another scale layout.
	Recipe fp8.Recipe
	// Recompute keeps neither the LayerNorm outputs nor the GELU output for
	// backward, not even in FP8: backward recomputes them (the forward
	// kernels again, from x and fc) and quantizes them again. Same bits as
	// without it; only the attention output's FP8 copy stays kept.
	Recompute bool
	// KeepTransposed keeps, for every linear layer that keeps its input,
	// the transposed FP8 copy too (gemm.LinearConfig.KeepTransposed): twice
	// the bytes, no transpose in backward, same bits.
	KeepTransposed bool
	// KeepTransposedLayers keeps the transposed FP8 copy of the named
	// linear layers' inputs only ("attn.qkv", "attn.proj", "mlp.fc",
	// "mlp.proj"), as KeepTransposed does for all four: mlp.proj's input,
	// FFN wide, is 4/7 of a block's FP8 inputs at FFN = 4h, and its
	// transpose the largest. Unknown names are refused.
	KeepTransposedLayers []string
	// Attention picks the kernels of attention: AttentionFlash (the zero
	// value), AttentionGEMM or AttentionCuDNN.
	Attention Attention
	// Head is the precision of the tied output head: HeadFP32 (the zero
	// value) or HeadBF16, PyTorch autocast's roundings.
	Head HeadPrecision
	// GradType is the type of the gradient views Backward accumulates into
	// (the optimizer's Config.GradType): buffer.Float32 (or zero) or
	// buffer.BFloat16. With bfloat16 the linear weights' GEMMs add their
	// products into the views and round (gemm.Gradient); the small
	// parameters' gradients (biases, LayerNorms, embeddings) are summed in
	// float32 as with float32 views, into a scratch of the model, then
	// added into their views with one rounding (kernels.GPTAccumulateBF16s,
	// a layer's in one launch).
	// So each micro-batch rounds the views, where float32 views round
	// nothing. The doc of the package says more.
	GradType buffer.DType
	// Unfused runs the forward pass's element-wise work as separate
	// passes: LayerNorm and GELU write float32 outputs (in scratch
	// buffers, 4 x tokens x (hidden + FFN) bytes) that the linear layers
	// then quantize (gemm.Linear.Forward), and the bias and residual
	// connection after attn.proj and mlp.proj take a pass of their own. By
	// default LayerNorm, after that residual connection, and GELU, with
	// fc's bias, write the FP8 codes of the next linear layer's input
	// directly (fused.go): the same bits in fewer passes over memory.
	// Recompute implies Unfused: its backward hands the linear layers
	// float32 inputs to quantize again. Unfused also runs the backward
	// pass's separate amax passes over the output gradients (backward.go).
	Unfused bool
	// Epilogue has the qkv and fc GEMMs of the fused forward add their
	// biases in cuBLASLt's epilogue and write the kept bfloat16 qkv and fc
	// directly (gemm.BF16Bias): no float32 product written and read again,
	// no bias pass (docs/BENCHMARKS.md's profile of the 1.3B micro-batch:
	// "bias adds 4%"). GELU then reads the bfloat16 fc
	// (kernels.GPTGELUFP8). The product plus the bias is rounded once to
	// bfloat16, as the separate pass rounds it, but in another kernel, whose
	// sums may round otherwise: qkv and fc may differ from the default's by
	// one bfloat16 ulp. Memory is the same: the float32 products went into
	// dqkv and dfc, backward's gradient buffers. Off in a zero Options;
	// examples/gpt turns it on by default with per-tensor recipes (faster
	// at both shapes on an H100, 2026-12-05, scripts/gpu/NOTES.md).
	// cuBLASLt 13 (measured 2026-12-05 on an H200) refuses a bias that is only 2-byte aligned:
	// the model's biases must then sit at 16-byte aligned addresses. The
	// fused forward only: New and PredictMemory refuse it with Unfused or
	// Recompute.
	Epilogue bool
	// ActGradBF16 keeps activation gradients in bfloat16 where PyTorch's
	// autocast does: the input gradients of attn.qkv, mlp.fc and mlp.proj
	// (their dgrad GEMMs' outputs), GELU's gradient in and out (mlp.fc's
	// output gradient), read so by the LayerNorm gradients, mlp.fc's bias
	// gradient and its FP8 quantization. The residual stream's gradient
	// stays float32, as PyTorch's does, and so do attention's gradients
	// (its kernels read and write float32). Fewer bytes moved (backward.go)
	// and 4 x tokens x FFN bytes less scratch, at bfloat16's rounding of
	// those gradients (2000 steps of the 124M model: validation loss within
	// 0.54% of float32's). Off in a zero Options; examples/gpt turns it on
	// by default with per-tensor recipes; not with Unfused.
	ActGradBF16 bool
	// FuseDY casts each linear layer's output gradient to FP8 in one pass
	// of the model's own (kernels.GPTDYCast, gemm.LinearConfig.CallerCastsDY)
	// that writes the codes row-major and transposed and sums the bias
	// gradient, where the default casts (gemm), transposes (the weight
	// gradient's product, from the codes) and sums (kernels.GPTColumnSum),
	// reading dy again: per block the bias sums' 36nh bytes and the
	// transposes' 9nh less (backward.go's table). The same bits. The
	// transposed codes move from the products' scratch to the engine's
	// activation buffer (PredictMemory counts them). Per-tensor recipes
	// only (the first Forward refuses 128x128 weights' 1x128 activations);
	// not with Unfused. Off in a zero Options; examples/gpt turns it on
	// by default (1.021x against 1.003x of compiled PyTorch's step at 1.3B,
	// an H200, 2026-12-05).
	FuseDY bool
	// DelayedActivations, when positive, scales the FP8 inputs that the
	// fused forward's LayerNorm and GELU kernels write (attn.qkv's, mlp.fc's,
	// mlp.proj's) from the largest amax of the last DelayedActivations
	// training forwards (after Transformer Engine's delayed recipe, whose
	// default history is 1024), casting each in one pass instead of two
	// (actscale.go). The first training forward, and evaluations before
	// the second, scale from their own amax. Per-tensor activation recipes
	// on the fused forward only. DelayedActivationState and
	// SetDelayedActivationState carry the histories through a checkpoint.
	// Off (0) in a zero Options.
	DelayedActivations int
}

// Attention is the implementation of the model's attention.
type Attention int

const (
	// AttentionFlash, the default, runs the fused kernels of
	// examples/gpt/kernels/flash.cu (bfloat16 q, k, v and output gradient on
	// the tensor cores, float32 softmax statistics): per layer it keeps
	// the bfloat16 output and a logsumexp per row, and needs no seq x seq
	// scratch. Head widths (Hidden/Heads) 64 and 128 only: New refuses
	// others.
	AttentionFlash Attention = iota
	// AttentionGEMM runs six batched TF32 GEMMs of cuBLASLt around the
	// softmax kernels of examples/gpt/kernels/attention.cu: any head width,
	// float32 probabilities [batch, heads, seq, seq] kept per layer and a
	// score-gradient scratch of the same size.
	AttentionGEMM
	// AttentionCuDNN runs NVIDIA's fused flash attention of cuDNN 9
	// (package examples/gpt/cudnn, opened at run time): bfloat16 q, k, v
	// read in place, kept like AttentionFlash's. Head widths that are
	// multiples of 8. Only engines without cuDNN's nondeterministic note
	// (cudnn.Config.Deterministic), and the backward in its repeatable
	// form (cudnn.Config.Repeatable: dq is one product from the score
	// gradient kept in a workspace, 512 MiB at the 1.3B shape, instead of a
	// float32 accumulation across key blocks, which made cuDNN 9.14's
	// backward differ between runs in a few elements); that form repeated
	// its bits on an H100 (2026-12-05). New fails, with the reason, where
	// cuDNN cannot be opened or refuses the shapes (no fallback to the
	// fused kernels).
	AttentionCuDNN
)

var attentionNames = [...]string{AttentionFlash: "flash", AttentionGEMM: "gemm", AttentionCuDNN: "cudnn"}

// String returns "flash", "gemm" or "cudnn" (ParseAttention's names).
func (a Attention) String() string { return nameOf(a, attentionNames[:], "Attention") }

// ParseAttention returns the Attention named "flash", "gemm" or "cudnn"
// (any case).
func ParseAttention(s string) (Attention, error) {
	return parseName[Attention](s, attentionNames[:], "attention")
}

// attnPrecision returns the precision of the model's attention.
func (o Options) attnPrecision() attnPrecision {
	switch o.Attention {
	case AttentionFlash:
		return attnFlash
	case AttentionCuDNN:
		return attnCuDNN
	}
	return attnPrecisionM
}

// check refuses options the model of shape cfg on batch x seq tokens
// cannot run: Epilogue off the fused forward, an unknown Attention,
// HeadPrecision or GradType, or flash attention on heads of a width its
// kernels do not take (no silent fallback to the GEMMs).
func (o Options) check(cfg model.Config, batch, seq int) error {
	if err := checkLinearLayers(o.KeepTransposedLayers); err != nil {
		return fmt.Errorf("gpumodel: Options.KeepTransposedLayers: %w", err)
	}
	if o.Epilogue && !o.fused() {
		return fmt.Errorf("gpumodel: Options.Epilogue runs on the fused forward only, not with Unfused (%v) or Recompute (%v)", o.Unfused, o.Recompute)
	}
	if g := o.GradType; g != 0 && g != buffer.Float32 && g != buffer.BFloat16 {
		return fmt.Errorf("gpumodel: Options.GradType %v: want float32 or bfloat16", g)
	}
	if o.ActGradBF16 && o.Unfused {
		return fmt.Errorf("gpumodel: Options.ActGradBF16 takes the fused backward pass, not Unfused")
	}
	if o.FuseDY && o.Unfused {
		return fmt.Errorf("gpumodel: Options.FuseDY takes the fused backward pass, not Unfused")
	}
	if o.DelayedActivations < 0 || (o.DelayedActivations > 0 && !o.fused()) {
		return fmt.Errorf("gpumodel: Options.DelayedActivations %d: want a positive history length, on the fused forward (not Unfused %v or Recompute %v)", o.DelayedActivations, o.Unfused, o.Recompute)
	}
	if o.DelayedActivations > 0 && o.Recipe.Scaling == fp8.Block128x128 {
		return fmt.Errorf("gpumodel: Options.DelayedActivations scales activations per tensor; weights of recipe %v have activations in 1x128 blocks", o.Recipe)
	}
	if o.Head != HeadFP32 && o.Head != HeadBF16 {
		return fmt.Errorf("gpumodel: Options.Head %v: want HeadFP32 or HeadBF16", o.Head)
	}
	switch o.Attention {
	case AttentionGEMM:
		return nil
	case AttentionCuDNN:
		if d := cfg.HeadDim(); d%8 != 0 {
			return fmt.Errorf("gpumodel: head width %d: %w: cuDNN's fused attention takes multiples of 8 (-attention gemm takes any width)", d, cudnn.ErrNotSupported)
		}
		return nil
	case AttentionFlash:
	default:
		return fmt.Errorf("gpumodel: Options.Attention %v: want AttentionFlash, AttentionGEMM or AttentionCuDNN", o.Attention)
	}
	if d := cfg.HeadDim(); d != 64 && d != 128 {
		return fmt.Errorf("gpumodel: head width %d (hidden %d in %d heads): flash attention (the zero Options.Attention) takes head widths 64 and 128 only; "+
			"choose the heads accordingly or set Options.Attention to AttentionGEMM (examples/gpt: -attention gemm)", d, cfg.Hidden, cfg.Heads)
	}
	sh := kernels.FlashShape{Batch: batch, Heads: cfg.Heads, Seq: seq, D: cfg.HeadDim()}
	if err := sh.Check(); err != nil {
		return fmt.Errorf("gpumodel: flash attention (Options.Attention AttentionFlash): %w", err)
	}
	return nil
}
