package gpumodel

import (
	"errors"
	"fmt"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/gemm"
)

// Attention in the attnCuDNN precision: cuDNN's fused flash attention
// (package examples/gpt/cudnn), opened at run time. It reads q, k, v in
// place from the model's bfloat16 qkv (cudnn.RowLayout: no copy of the
// heads) and keeps per layer, like attnFlash, the bfloat16 output (here
// row-major [batch·seq, h]) and the float32 log-sum-exp of every row.
// Nothing is converted around it: attn.proj reads the kept output as its
// bfloat16 input, writes its input gradient in bfloat16 where cuDNN reads
// dO, and attn.qkv reads the bfloat16 dqkv that cuDNN writes in qkv's
// interleaved form (cudnnLinear).

// cudnnWorkspace bounds the workspace of cuDNN's plans (cudnn.Config's
// MaxWorkspace), so that the model's memory is a function of the shapes.
const cudnnWorkspace = 64 << 20

// cudnnConfig is the cudnn.Config of the model's attention: no engine
// that cuDNN marks nondeterministic (Deterministic), and the backward's
// repeatable form (Repeatable: dq written by one product from the score
// gradient kept in the workspace, not accumulated across key blocks, whose
// order made cuDNN 9.14's backward differ between runs).
func cudnnConfig(batch, seq, h, heads int) cudnn.Config {
	sh := cudnn.Shape{Batch: batch, Heads: heads, Seq: seq, D: h / heads}
	return cudnn.Config{Shape: sh, Layout: cudnn.RowLayout(sh), Scale: attnScaleFor(h / heads), MaxWorkspace: cudnnWorkspace,
		Deterministic: true, Repeatable: true}
}

// cudnnScratchBytes is what newCuDNNAttention allocates: cuDNN's
// workspace (cudnn.WorkspaceBytes, the score gradient of every head
// included: 512 MiB at 1.3B x 4). The output gradient and dqkv live in
// the model's buffers.
func cudnnScratchBytes(batch, seq, h, heads int) int {
	return cudnn.WorkspaceBytes(cudnnConfig(batch, seq, h, heads))
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
	c := cudnnConfig(batch, seq, h, heads)
	a.dnn, err = cudnn.New(lib, k.Device(), c)
	if errors.Is(err, cudnn.ErrNotSupported) { // the accumulating form, said so (Model.AttentionNote)
		a.dnnNote = fmt.Sprintf("the repeatable backward was refused (%v): dq accumulated across key blocks, whose bits may differ between runs", err)
		c.Repeatable = false
		a.dnn, err = cudnn.New(lib, k.Device(), c)
	}
	if err != nil {
		return nil, fmt.Errorf("gpumodel: attention cudnn (%v): %w", lib, err)
	}
	return a, nil
}

// AttentionNote says how the model's attention departs from its Options:
// with AttentionCuDNN, that cuDNN refused the repeatable form of the
// backward pass and the model took the accumulating one (whose workspace
// differs from what PredictMemory counts: a float32 dq accumulator in
// place of the score gradient). Empty otherwise.
func (m *Model) AttentionNote() string {
	if m.attn == nil {
		return ""
	}
	return m.attn.dnnNote
}

// qkvParts returns where q, k and v of the bfloat16 qkv start.
func (a *attention) qkvParts(qkv cuda.DevicePtr) (q, k, v cuda.DevicePtr) {
	return qkv, qkv.Add(2 * a.h), qkv.Add(4 * a.h)
}

// cudnnForward queues the output from the bfloat16 qkv, keeping it and
// the statistics in p (attnKeptBytes). It writes no float32 output: the
// kept bfloat16 output is attn.proj's input (Model.attnOut).
func (a *attention) cudnnForward(s *cuda.Stream, p, qkv cuda.DevicePtr) error {
	if !a.qkv16 {
		return fmt.Errorf("gpumodel: attention cudnn reads qkv in bfloat16 only")
	}
	o16, stats := a.flashKept(p)
	q, k, v := a.qkvParts(qkv)
	if err := a.dnn.Forward(s, cudnn.ForwardArgs{Q: q, K: k, V: v, O: o16, Stats: stats}); err != nil {
		return fmt.Errorf("gpumodel: attention: %w", err)
	}
	return nil
}

// cudnnBackward queues dqkv [batch·seq, 3h] (bfloat16, overwritten) from
// the bfloat16 output gradient do [batch·seq, h] and what cudnnForward
// kept in p.
func (a *attention) cudnnBackward(s *cuda.Stream, dqkv, do, p, qkv cuda.DevicePtr) error {
	if !a.qkv16 {
		return fmt.Errorf("gpumodel: attention cudnn reads qkv in bfloat16 only")
	}
	o16, stats := a.flashKept(p)
	q, k, v := a.qkvParts(qkv)
	dq, dk, dv := a.qkvParts(dqkv)
	err := a.dnn.Backward(s, cudnn.BackwardArgs{Q: q, K: k, V: v, O: o16, DO: do, Stats: stats, DQ: dq, DK: dk, DV: dv})
	if err != nil {
		return fmt.Errorf("gpumodel: attention: %w", err)
	}
	return nil
}

// attnOut returns attn.proj's input in block a: the bfloat16 output that
// cuDNN's attention keeps in a.p, else the float32 m.att.
func (m *Model) attnOut(a *layer) cuda.DevicePtr {
	if m.opts.Attention == AttentionCuDNN {
		o16, _ := m.attn.flashKept(a.p)
		return o16
	}
	return m.att
}

// cudnnLinear sets the element types of linear layer i around cuDNN's
// attention, which reads and writes bfloat16 only:
//
//   - attn.proj reads the kept bfloat16 output as its input. Quantizing a
//     bfloat16 value gives the code of its exact float32 widening, so
//     the forward's bits are those of the widened copy. Its dy (the
//     residual stream's gradient) stays float32.
//   - attn.proj writes its input gradient in bfloat16 (dgradBF16),
//     where cuDNN reads dO: the GEMM rounds its float32 sums, as the
//     rounding pass did. cuBLASLt may pick another algorithm for a
//     bfloat16 output, summing in another order: a sum near a rounding
//     boundary may then land one bfloat16 ulp away (gemm's
//     TestLinearDGradBF16 allows one ulp and logs how many differ).
//   - attn.qkv reads cuDNN's bfloat16 dqkv as its dy, and its bias
//     gradient sums the bfloat16 values (GPTColumnSumBF16).
//
// issue 37's profile of the 1.3B micro-batch (docs/BENCHMARKS.md, "One
// micro-batch, activations and the other kernels") puts a third of the
// time in element-wise kernels. Bytes of traffic per block this removes,
// n tokens, h hidden, per-tensor recipes:
//
//	widen O to float32 y (read 2, write 4)             6nh
//	attn.proj's amax pass and cast read y in bfloat16   4nh
//	attn.proj's dx written in bfloat16                  2nh
//	round dx to bfloat16 dO (read 4, write 2)           6nh
//	widen dqkv to float32 (read 6nh, write 12nh)       18nh
//	attn.qkv's amax pass and cast read dqkv in bf16    12nh
//	attn.qkv's bias sum reads dqkv in bfloat16          6nh
//	total                                              54nh
//
// (1x128 blocks read dy once more, down the columns: 6nh more.) At 1.3B x
// 4 x 2048 (nh = 16.8 MB) about 0.9 GB per block, 22 GB per micro-batch
// of 24 blocks. Memory: the float32 attention output m.att (4nh), half of
// m.dtmp (2nh) and attention's own dO and dqkv (8nh) go from the scratch,
// and with Epilogue half of m.dqkv (6nh) too (cudnnScratch).
func cudnnLinear(c *gemm.LinearConfig, i int) {
	switch i {
	case projL:
		c.Input, c.GradInput = buffer.BFloat16, buffer.Float32
	case qkvL:
		c.GradInput = buffer.BFloat16
	}
}

// cudnnScratch returns the bytes of the model's scratch buffers around
// attention: att, attn.proj's float32 input; dtmp, its input gradient;
// dqkv, attention's gradient of qkv, also the float32 product of the
// qkv GEMM in the forward pass unless Epilogue (forwardFused). With
// AttentionCuDNN there is no att (attnOut), dtmp is bfloat16, and dqkv
// bfloat16 in the backward pass: with Epilogue it is only that.
func cudnnScratch(n, h int, o Options) (att, dtmp, dqkv int) {
	if o.Attention != AttentionCuDNN {
		return 4 * n * h, 4 * n * h, 4 * n * 3 * h
	}
	dqkv = 4 * n * 3 * h
	if o.Epilogue && o.fused() {
		dqkv = 2 * n * 3 * h
	}
	return 0, 2 * n * h, dqkv
}
