package gpumodel

import (
	"math"

	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/internal/cuda"
)

// Forward queues the forward pass on tokens [batch, seq] and the loss
// against targets (per row; Loss reads the mean). It also leaves, in place
// of the logits, their gradient for Backward, scaled by dloss (1/k when
// k micro-batches are averaged).
func (m *Model) Forward(params Params, tokens, targets []int32, dloss float64) error {
	if err := m.upload(tokens, targets); err != nil {
		return err
	}
	h, f, n := m.cfg.Hidden, m.cfg.FFN, m.rows
	wte, err := hp(params, "embed.tokens")
	if err != nil {
		return err
	}
	wpe, err := hp(params, "embed.positions")
	if err != nil {
		return err
	}
	x := m.xf
	if len(m.layers) > 0 {
		x = m.layers[0].x
	}
	if err := m.k.GPTEmbed(m.s, x, wte, wpe, m.tok, n, m.seq, h); err != nil {
		return err
	}
	for l := range m.layers {
		a := &m.layers[l]
		next := m.xf
		if l+1 < len(m.layers) {
			next = m.layers[l+1].x
		}
		steps := []func() error{
			func() error { return m.layerNorm(params, lname(l, "ln1"), a.ln1, a.mean1, a.rstd1, a.x) },
			func() error { return m.linear(params, lname(l, "attn.qkv"), a.qkv, a.ln1, a.ln1q, 3*h) },
			func() error { return m.attn.forward(m.s, a.att, a.p, a.qkv) },
			func() error { return m.linear(params, lname(l, "attn.proj"), a.x2, a.att, a.attq, h) },
			func() error { return m.k.GPTAdd(m.s, a.x2, a.x2, a.x, n*h) },
			func() error { return m.layerNorm(params, lname(l, "ln2"), a.ln2, a.mean2, a.rstd2, a.x2) },
			func() error { return m.linear(params, lname(l, "mlp.fc"), a.fc, a.ln2, a.ln2q, f) },
			func() error { return m.k.GPTGELU(m.s, a.gelu, a.fc, n*f) },
			func() error { return m.linear(params, lname(l, "mlp.proj"), next, a.gelu, a.geluq, h) },
			func() error { return m.k.GPTAdd(m.s, next, next, a.x2, n*h) },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
	}
	if err := m.layerNorm(params, "final_ln", m.lnf, m.meanf, m.rstdf, m.xf); err != nil {
		return err
	}
	if err := m.k.GPTLinearBF16(m.s, m.logits, m.lnf, wte, n, h, m.cfg.Vocab); err != nil {
		return err
	}
	return m.k.GPTCrossEntropy(m.s, m.losses, m.logits, m.logits, m.tgt, n, m.cfg.Vocab, float32(dloss/float64(n)))
}

// layerNorm queues the named LayerNorm of x into y.
func (m *Model) layerNorm(params Params, name string, y, mean, rstd, x cuda.DevicePtr) error {
	w, err := hp(params, name+".weight")
	if err != nil {
		return err
	}
	b, err := hp(params, name+".bias")
	if err != nil {
		return err
	}
	return m.k.GPTLayerNorm(m.s, y, mean, rstd, x, w, b, m.rows, m.cfg.Hidden, model.LNEps)
}

// attnScale is the attention's score scale, 1/sqrt(head width).
func attnScale(m *Model) float32 { return float32(1 / math.Sqrt(float64(m.cfg.HeadDim()))) }
