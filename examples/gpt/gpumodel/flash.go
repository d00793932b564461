package gpumodel

import (
	"fmt"

	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/kernels"
)

// Attention in the attnFlash precision: the fused kernels of
// examples/gpt/kernels/flash.cu (FlashAttention-2) instead of the six GEMMs.
// The heads of q, k, v are copied to packed bfloat16 (AttentionSplitHeadsBF16);
// FlashForward writes y straight into the model's row-major activation and
// keeps, per layer, the output in bfloat16 and the logsumexp of every row
// (attnKeptBytes) instead of the probabilities [batch, heads, seq, seq];
// FlashBackward recomputes the probabilities tile by tile and writes dq,
// dk, dv straight into dqkv. No cuBLASLt, no seq x seq matrix anywhere:
// the model's score-gradient scratch (ds) is not allocated either. Head
// widths 64 and 128 only.

// newFlashAttention is newAttention for attnFlash: the three packed
// bfloat16 head buffers, the bfloat16 output gradient (in a.o) and the
// per-row statistic of the backward pass.
func newFlashAttention(k *kernels.Set, batch, seq, h, heads int) (*attention, error) {
	a := &attention{k: k, prec: attnFlash, layout: attnPacked, batch: batch, seq: seq, h: h, heads: heads, d: h / heads}
	a.scale = attnScaleFor(a.d)
	if err := a.flashShape().Check(); err != nil {
		return nil, fmt.Errorf("gpumodel: attention: %w", err)
	}
	if err := k.LoadFlash(); err != nil { // a Set made by kernels.LoadWithoutFlash
		return nil, fmt.Errorf("gpumodel: attention: %w", err)
	}
	n := batch * seq * h
	var err error
	alloc := func(p *cuda.DevicePtr, bytes int) {
		if err == nil {
			*p, err = k.Device().Alloc(bytes)
		}
	}
	for _, p := range []*cuda.DevicePtr{&a.q, &a.kk, &a.v, &a.o} {
		alloc(p, 2*n)
	}
	alloc(&a.dsum, 4*batch*heads*seq)
	if err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// flashScratchBytes is what newFlashAttention allocates: four packed
// bfloat16 buffers of batch·seq·h elements and one float32 per row of
// every head.
func flashScratchBytes(batch, seq, h, heads int) int { return 4*2*batch*seq*h + 4*batch*heads*seq }

// attnKeptBytes is what one layer keeps from forward to backward for
// attention in precision prec: the float32 probabilities [batch, heads,
// seq, seq], or for attnFlash and attnCuDNN the bfloat16 output
// (attnFlash: [batch·heads, seq, d]; attnCuDNN: [batch·seq, h]) followed by
// the float32 logsumexp of every row [batch·heads·seq].
func attnKeptBytes(batch, seq, h, heads int, prec attnPrecision) int {
	if prec.fused() {
		return 2*batch*seq*h + 4*batch*heads*seq
	}
	return 4 * batch * heads * seq * seq
}

// flashShape is the kernels' shape of the attention.
func (a *attention) flashShape() kernels.FlashShape {
	return kernels.FlashShape{Batch: a.batch, Heads: a.heads, Seq: a.seq, D: a.d}
}

// flashKept splits a layer's kept buffer into the bfloat16 output and the
// logsumexp.
func (a *attention) flashKept(p cuda.DevicePtr) (o16, lse cuda.DevicePtr) {
	return p, p.Add(2 * a.batch * a.seq * a.h)
}

// flashForward queues y [batch·seq, h] from qkv with the fused kernel,
// keeping the output and logsumexp in p (attnKeptBytes).
func (a *attention) flashForward(s *cuda.Stream, y, p, qkv cuda.DevicePtr) error {
	if err := a.split(s, qkv, 0, 1, 2); err != nil {
		return err
	}
	o16, lse := a.flashKept(p)
	if err := a.k.FlashForward(s, kernels.FlashRows{Ptr: y, LD: a.h}, o16, lse, a.q, a.kk, a.v, a.flashShape(), a.scale); err != nil {
		return fmt.Errorf("gpumodel: attention: %w", err)
	}
	return nil
}

// flashBackward queues dqkv [batch·seq, 3h] (overwritten) from dy and
// what flashForward kept in p; the heads of qkv are copied again (the
// packed buffers are shared by every layer).
func (a *attention) flashBackward(s *cuda.Stream, dqkv, dy, p, qkv cuda.DevicePtr) error {
	if err := a.split(s, qkv, 0, 1, 2); err != nil {
		return err
	}
	h := a.h
	o16, lse := a.flashKept(p)
	g := kernels.FlashGrads{DQ: kernels.FlashRows{Ptr: dqkv, LD: 3 * h}, DK: kernels.FlashRows{Ptr: dqkv.Add(4 * h), LD: 3 * h},
		DV: kernels.FlashRows{Ptr: dqkv.Add(8 * h), LD: 3 * h}}
	err := a.k.FlashBackward(s, g, kernels.FlashScratch{DO16: a.o, DSum: a.dsum}, kernels.FlashRows{Ptr: dy, LD: h},
		a.q, a.kk, a.v, o16, lse, a.flashShape(), a.scale)
	if err != nil {
		return fmt.Errorf("gpumodel: attention: %w", err)
	}
	return nil
}
