package gpumodel

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
	"github.com/distopt/distopt/gemm"
)

// Memory is the device memory of the model's activations for one
// micro-batch, in bytes. Per layer it is what a block keeps from Forward
// to Backward; per step (Step) all layers plus what lies outside them.
type Memory struct {
	Layers int
	// LinearInputs: per layer, the FP8 inputs of the four linear layers
	// with their scales, held by the gemm.Linears (tokens x (3h + f) bytes
	// plus scales; the attention output's alone under Recompute; doubled
	// under KeepTransposed).
	LinearInputs int
	// LinearInputsBF16: per layer, what the same four inputs take in
	// bfloat16 (2 bytes per element), as PyTorch's autocast keeps them.
	LinearInputsBF16 int
	// Saved: per layer, the other tensors backward reads: the residual
	// stream x and x2 and the two LayerNorms' mean and rstd in float32,
	// the linear outputs qkv and fc (attention's and GELU's inputs) in
	// bfloat16, as PyTorch's autocast keeps them.
	Saved int
	// Probs: per layer, what attention keeps: with flash attention (the
	// default) its output in bfloat16 [batch·heads, seq, d] and the
	// float32 logsumexp of every row [batch·heads·seq]; with AttentionGEMM
	// the probabilities [batch, heads, seq, seq] in float32.
	Probs int
	// Final: per step, kept outside the blocks: the final LayerNorm's
	// input, output, mean and rstd, the logits, their gradient, the losses;
	// with HeadBF16, the head's input and the logits' gradient in
	// bfloat16 too; with Options.DelayedActivations, the amax histories
	// and scales.
	Final int
	// Scratch: per step, the model's buffers shared by all layers and
	// dead between Forward and Backward: one block's attention output
	// (none with AttentionCuDNN, whose kept output attn.proj reads), its
	// LayerNorm and GELU outputs with Unfused or Recompute, a word for
	// the fused kernels' amax unless Unfused, the gradients flowing back
	// (GELU's in bfloat16 with ActGradBF16, in half the bytes; with
	// HeadBF16, the head's weight gradient before rounding too), the token
	// indices; with bfloat16 gradient views (Options.GradType), the float32
	// sums of the small parameters' gradients (4 bytes per element of
	// every bias, LayerNorm and embedding).
	Scratch int
	// Engine: per step, the gemm engine's activation buffer
	// (gemm.Engine.ActivationScratch, PlanLinear's Transient of the
	// largest layer), shared with every user of the engine. The engine's
	// product scratch and fixed workspace are not counted.
	Engine int
}

// PerLayer returns what one block keeps for Backward.
func (m Memory) PerLayer() int { return m.LinearInputs + m.Saved + m.Probs }

// Step returns the activation memory of one micro-batch: every block's,
// plus Final, Scratch and Engine.
func (m Memory) Step() int { return m.Layers*m.PerLayer() + m.Final + m.Scratch + m.Engine }

// LinearRatio returns LinearInputs / LinearInputsBF16 (issue 23's goal:
// at most 0.52 without KeepTransposed).
func (m Memory) LinearRatio() float64 { return float64(m.LinearInputs) / float64(m.LinearInputsBF16) }

func (m Memory) String() string {
	const mib = 1 << 20
	return fmt.Sprintf("per layer %.2f MiB (FP8 linear inputs %.2f MiB = %.4fx of BF16's %.2f MiB, saved %.2f MiB, attention %.2f MiB); per step %.2f MiB (%d layers, final %.2f MiB, scratch %.2f MiB, engine %.2f MiB)",
		float64(m.PerLayer())/mib, float64(m.LinearInputs)/mib, m.LinearRatio(), float64(m.LinearInputsBF16)/mib,
		float64(m.Saved)/mib, float64(m.Probs)/mib, float64(m.Step())/mib, m.Layers, float64(m.Final)/mib,
		float64(m.Scratch)/mib, float64(m.Engine)/mib)
}

// PredictMemory returns the activation memory of a model of shape cfg on
// micro-batches of batch x seq tokens with options o, from the shapes
// alone. o.Recipe must be set (the optimizer's recipe); options New
// refuses (flash attention on heads it does not take) are refused here too.
func PredictMemory(cfg model.Config, batch, seq int, o Options) (Memory, error) {
	if o.Recipe == (fp8.Recipe{}) {
		return Memory{}, errors.New("gpumodel: PredictMemory needs Options.Recipe (the optimizer's recipe of the weights)")
	}
	if err := o.check(cfg, batch, seq); err != nil {
		return Memory{}, err
	}
	n, h, f, v := batch*seq, cfg.Hidden, cfg.FFN, cfg.Vocab
	prec := o.attnPrecision()
	ds := batch * cfg.Heads * seq * seq // the score gradient's scratch
	if prec.fused() {
		ds = 0
	}
	dhead, head16 := 0, 0 // HeadBF16: the head's weight gradient before rounding; its bfloat16 input and logits' gradient (headGEMMs)
	if o.Head == HeadBF16 {
		dhead, head16 = v*h, 2*n*(h+v)
	}
	dfc := 2 * n * f // GELU's gradient in and out, float32 (the input shares Forward's float32 fc product with ActGradBF16)
	if o.ActGradBF16 {
		dfc = n * f
	}
	att, dtmp, dqkv := cudnnScratch(n, h, o)
	if dqkvInDFC(n, f, dqkv) {
		dqkv = 0
	}
	gsum := 0 // bfloat16 gradient views: the small parameters' float32 sums
	if o.bf16Grads() {
		_, gsum = gradSumLayout(cfg)
	}
	m := Memory{
		Layers:           cfg.Layers,
		LinearInputsBF16: 2 * n * (3*h + f),
		Saved:            4*(n*h+n*h+4*n) + 2*(n*3*h+n*f),
		Probs:            attnKeptBytes(batch, seq, h, cfg.Heads, prec),
		Final:            4*(2*n*h+3*n+2*n*v) + head16 + actScaleBytes(cfg, o),
		Scratch: att + dtmp + dqkv + 4*(3*n+v+1+2*n*h+ds+dfc+dhead+gsum) + producerScratch(n, h, f, o) +
			attnScratchBytes(batch, seq, h, cfg.Heads, prec, attnLayoutM),
	}
	wl, err := gemm.LayoutOf(o.Recipe)
	if err != nil {
		return Memory{}, fmt.Errorf("gpumodel: %w", err)
	}
	for i := range nLinear {
		c, err := linearConfig(cfg, o, i)
		if err != nil {
			return Memory{}, err
		}
		lm, err := gemm.PlanLinear(c, n, wl)
		if err != nil {
			return Memory{}, fmt.Errorf("gpumodel: %s: %w", linearNames[i], err)
		}
		m.LinearInputs += lm.Kept
		m.Engine = max(m.Engine, lm.Transient)
	}
	return m, nil
}

// producerScratch returns the scratch of the linear inputs' producers:
// the float32 outputs of a LayerNorm and of GELU, unfused; the amax word
// of the fused kernels, forward or backward (Recompute: both).
func producerScratch(n, h, f int, o Options) int {
	b := 0
	if o.fused() || o.fusedBackward() {
		b = 4
	}
	if !o.fused() {
		b += 4 * (n*h + n*f)
	}
	return b
}

// MemoryReport compares the prediction with what was allocated.
type MemoryReport struct {
	// Predicted: PredictMemory for the model's shapes and options.
	Predicted Memory
	// Allocated: the model's buffers by category as it allocated them (per
	// layer: divided by the layers), the bytes its linear layers keep now
	// (gemm.Linear.KeptBytes, summed over the layers and divided), and the
	// engine's activation buffer as it holds it now.
	Allocated Memory
	// Device: the device allocator's own count (cuda.Device.Usage) of what
	// the model allocated, its buffers in New and its layers' kept inputs
	// in Forward: Allocated's Layers x (LinearInputs + Saved + Probs) +
	// Final + Scratch when everything is accounted for.
	Device int
}

// Memory reports the model's activation memory after a Forward (the
// linear layers allocate their kept inputs there, and the recipe may be
// read there).
func (m *Model) Memory() (MemoryReport, error) {
	if len(m.layers) == 0 || m.layers[0].lin[0] == nil {
		return MemoryReport{}, errors.New("gpumodel: Memory before the first Forward")
	}
	p, err := PredictMemory(m.cfg, m.batch, m.seq, m.opts)
	if err != nil {
		return MemoryReport{}, err
	}
	L := len(m.layers)
	a := Memory{Layers: L, LinearInputsBF16: p.LinearInputsBF16, Saved: m.alloc[catSaved] / L, Probs: m.alloc[catProbs] / L,
		Final: m.alloc[catFinal], Scratch: m.alloc[catScratch], Engine: m.e.ActivationScratch()}
	kept := 0
	for _, l := range m.layers {
		for _, lin := range l.lin {
			kept += lin.KeptBytes()
		}
	}
	a.LinearInputs = kept / L
	return MemoryReport{Predicted: p, Allocated: a, Device: m.device}, nil
}

// separateDQKV, set by tests only, gives dqkv a buffer of its own even
// where dqkvInDFC lets it share dfc's: the same bits either way.
var separateDQKV bool

// dqkvInDFC reports whether the model's dqkv (dqkv bytes: attention's
// gradient of qkv in the backward pass, the qkv GEMM's float32 product in
// the forward pass) lives in the buffer of dfc (4nf bytes: mlp.fc's
// output gradient, and its float32 product in the forward pass; with
// ActGradBF16 also GELU's input gradient dg). Their lives never overlap
// on the model's one stream: forward, the qkv product is consumed by its
// bias pass before mlp.fc's product is written; backward, dfc and dg are
// consumed by mlp.fc's backward before attention's backward writes dqkv,
// which attn.qkv's backward consumes before the block below writes dg.
// Where the sizes allow (FFN at least 3 x hidden, as in GPT's 4 x), this
// saves 12nh bytes (6nh with Epilogue and cuDNN's attention): 192 MiB at
// 1.3B x 4 x 2048.
func dqkvInDFC(n, f, dqkv int) bool { return !separateDQKV && dqkv <= 4*n*f }
