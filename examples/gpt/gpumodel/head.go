package gpumodel

import (
	"github.com/distopt/distopt/cuda"
)

// HeadPrecision is the precision of the tied output head (the product of
// the final LayerNorm's output with the bfloat16 token embedding, the
// logits, the cross-entropy and their gradients).
type HeadPrecision int

const (
	// HeadFP32, the zero value, multiplies the float32 LayerNorm output by
	// the bfloat16 embedding with float32 accumulation and keeps the
	// logits, the cross-entropy and every gradient of the head in float32.
	HeadFP32 HeadPrecision = iota
	// HeadBF16 rounds where PyTorch's BF16 autocast rounds
	// (scripts/gpt/torch_gpt.py, model.CPU.HeadBF16): the LayerNorm output
	// to bfloat16 before the product; the logits to bfloat16 (the
	// cross-entropy still computes in float32 from them); the logits'
	// gradient to bfloat16 before the head's two backward products; their
	// results, the LayerNorm output's gradient and the head's part of the
	// embedding's gradient, to bfloat16 (the latter on its own, before it
	// is added into the float32 gradient). The three products run on
	// cuBLASLt's bfloat16 tensor cores with float32 sums, as autocast's
	// do (HeadFP32's are kernels.GPTLinearBF16's in-order float32 sums).
	// Rounding is to nearest even (kernels.GPTRoundBF16).
	HeadBF16
)

var headNames = [...]string{HeadFP32: "fp32", HeadBF16: "bf16"}

// String returns "fp32" or "bf16" (ParseHeadPrecision's names).
func (p HeadPrecision) String() string { return nameOf(p, headNames[:], "HeadPrecision") }

// ParseHeadPrecision returns the HeadPrecision named "fp32" or "bf16" (any
// case).
func ParseHeadPrecision(s string) (HeadPrecision, error) {
	return parseName[HeadPrecision](s, headNames[:], "head precision")
}

// headForward queues the logits from m.lnf (the final LayerNorm's
// output) and the embedding wte, the losses and, unless dloss is 0, the
// logits' gradient, with the roundings of m.opts.Head.
func (m *Model) headForward(wte cuda.DevicePtr, dloss float64) error {
	m.mark(PhaseHead)
	n, h, v := m.rows, m.cfg.Hidden, m.cfg.Vocab
	bf := m.opts.Head == HeadBF16
	if bf {
		if err := m.head.plan(wte); err != nil {
			return err
		}
		if err := m.k.GPTRoundBF16Pack(m.s, m.lnf, m.head.lnf16, m.lnf, n*h); err != nil {
			return err
		}
		if err := m.head.logits.Run(m.s, wte, m.head.lnf16, m.logits, 0, 0); err != nil {
			return err
		}
	} else if err := m.k.GPTLinearBF16(m.s, m.logits, m.lnf, wte, n, h, v); err != nil {
		return err
	}
	if err := m.roundIf(bf, m.logits, n*v); err != nil {
		return err
	}
	var dlogits cuda.DevicePtr
	if dloss != 0 {
		dlogits = m.dlogits
	}
	if err := m.k.GPTCrossEntropy(m.s, m.losses, dlogits, m.logits, m.tgt, n, v, float32(dloss/float64(n))); err != nil {
		return err
	}
	if !bf || dloss == 0 {
		return nil
	}
	return m.k.GPTRoundBF16Pack(m.s, m.dlogits, m.head.dlogits16, m.dlogits, n*v)
}

// headBackward queues the head's gradients: m.dln receives the LayerNorm
// output's, gwte the head's part of the embedding's (accumulated), with
// the roundings of m.opts.Head; under HeadBF16 that part is made in
// m.dhead first (headGEMMs), rounded, then added.
func (m *Model) headBackward(gwte, wte cuda.DevicePtr) error {
	n, h, v := m.rows, m.cfg.Hidden, m.cfg.Vocab
	if m.opts.Head != HeadBF16 {
		if err := m.s.Memset32(m.dln, 0, n*h); err != nil {
			return err
		}
		return m.k.GPTLinearBF16Grad(m.s, m.dln, gwte, m.dlogits, m.lnf, wte, n, h, v)
	}
	if err := m.head.plan(wte); err != nil {
		return err
	}
	if err := m.head.dx.Run(m.s, wte, m.head.dlogits16, m.dln, 0, 0); err != nil {
		return err
	}
	if err := m.head.dw.Run(m.s, m.head.lnf16, m.head.dlogits16, m.dhead, 0, 0); err != nil {
		return err
	}
	if err := m.k.GPTRoundBF16(m.s, m.dln, m.dln, n*h, false); err != nil {
		return err
	}
	return m.k.GPTRoundBF16(m.s, gwte, m.dhead, v*h, true)
}

// roundIf rounds the n float32 values at p to bfloat16 in place when on.
func (m *Model) roundIf(on bool, p cuda.DevicePtr, n int) error {
	if !on {
		return nil
	}
	return m.k.GPTRoundBF16(m.s, p, p, n, false)
}
