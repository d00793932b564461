package gpumodel

import (
	"fmt"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/kernels"
)

// Attention in the attnCuDNN precision: cuDNN's fused flash attention
// (package examples/gpt/cudnn), opened at run time. It reads q, k, v in
// place from the model's bfloat16 qkv (cudnn.RowLayout: no copy of the
// heads) and keeps per layer, like attnFlash, the bfloat16 output (here
// row-major [batch·seq, h]) and the float32 log-sum-exp of every row. The
// output is widened into y, the float32 output gradient rounded to
// bfloat16 before the backward pass, and the bfloat16 gradients cuDNN
// writes (in qkv's interleaved form) widened into dqkv, with the layout
// kernels of attention.cu over one "head" as wide as the row.

// cudnnWorkspace bounds the workspace of cuDNN's plans (cudnn.Config's
// MaxWorkspace), so that the model's memory is a function of the shapes.
const cudnnWorkspace = 64 << 20

// cudnnConfig is the cudnn.Config of the model's attention.
func cudnnConfig(batch, seq, h, heads int) cudnn.Config {
	sh := cudnn.Shape{Batch: batch, Heads: heads, Seq: seq, D: h / heads}
	return cudnn.Config{Shape: sh, Layout: cudnn.RowLayout(sh), Scale: attnScaleFor(h / heads), MaxWorkspace: cudnnWorkspace}
}

// cudnnScratchBytes is what newCuDNNAttention allocates: the bfloat16
// output gradient (batch·seq·h), the bfloat16 dqkv (3·batch·seq·h) and
// cuDNN's workspace (cudnn.WorkspaceBytes).
func cudnnScratchBytes(batch, seq, h, heads int) int {
	n := batch * seq * h
	return 2*n + 6*n + cudnn.WorkspaceBytes(cudnnConfig(batch, seq, h, heads))
}

// newCuDNNAttention is newAttention for attnCuDNN. It fails, naming the
// reason, where cuDNN cannot be opened or refuses the graphs.
func newCuDNNAttention(k *kernels.Set, batch, seq, h, heads int) (*attention, error) {
	a := &attention{k: k, prec: attnCuDNN, layout: attnPacked, batch: batch, seq: seq, h: h, heads: heads, d: h / heads}
	a.scale = attnScaleFor(a.d)
	lib, err := cudnn.Default()
	if err != nil {
		return nil, fmt.Errorf("gpumodel: attention cudnn: %w", err)
	}
	if a.dnn, err = cudnn.New(lib, k.Device(), cudnnConfig(batch, seq, h, heads)); err != nil {
		return nil, fmt.Errorf("gpumodel: attention cudnn (%v): %w", lib, err)
	}
	n := batch * seq * h
	if a.o, err = k.Device().Alloc(2 * n); err == nil {
		a.out, err = k.Device().Alloc(6 * n)
	}
	if err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// rowsOf is the layout of a row-major [batch·seq, w] activation as one
// head of width w: the layout kernels then copy it whole, converting.
func (a *attention) rowsOf(w int) kernels.HeadLayout {
	return kernels.HeadLayout{Batch: a.batch, Seq: a.seq, Heads: 1, D: w, LD: w}
}

// qkvParts returns where q, k and v of the bfloat16 qkv start.
func (a *attention) qkvParts(qkv cuda.DevicePtr) (q, k, v cuda.DevicePtr) {
	return qkv, qkv.Add(2 * a.h), qkv.Add(4 * a.h)
}

// cudnnForward queues y [batch·seq, h] from the bfloat16 qkv, keeping the
// output and the statistics in p (attnKeptBytes).
func (a *attention) cudnnForward(s *cuda.Stream, y, p, qkv cuda.DevicePtr) error {
	if !a.qkv16 {
		return fmt.Errorf("gpumodel: attention cudnn reads qkv in bfloat16 only")
	}
	o16, stats := a.flashKept(p)
	q, k, v := a.qkvParts(qkv)
	if err := a.dnn.Forward(s, cudnn.ForwardArgs{Q: q, K: k, V: v, O: o16, Stats: stats}); err != nil {
		return fmt.Errorf("gpumodel: attention: %w", err)
	}
	return a.k.AttentionSplitHeadsFromBF16(s, y, o16, a.rowsOf(a.h))
}

// cudnnBackward queues dqkv [batch·seq, 3h] (overwritten) from dy and
// what cudnnForward kept in p.
func (a *attention) cudnnBackward(s *cuda.Stream, dqkv, dy, p, qkv cuda.DevicePtr) error {
	if !a.qkv16 {
		return fmt.Errorf("gpumodel: attention cudnn reads qkv in bfloat16 only")
	}
	if err := a.k.AttentionSplitHeadsBF16(s, a.o, dy, a.rowsOf(a.h)); err != nil {
		return err
	}
	o16, stats := a.flashKept(p)
	q, k, v := a.qkvParts(qkv)
	dq, dk, dv := a.qkvParts(a.out)
	err := a.dnn.Backward(s, cudnn.BackwardArgs{Q: q, K: k, V: v, O: o16, DO: a.o, Stats: stats, DQ: dq, DK: dk, DV: dv})
	if err != nil {
		return fmt.Errorf("gpumodel: attention: %w", err)
	}
	return a.k.AttentionSplitHeadsFromBF16(s, dqkv, a.out, a.rowsOf(3*a.h))
}
