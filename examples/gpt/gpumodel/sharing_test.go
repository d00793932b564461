package gpumodel

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/examples/gpt/cudnn"
)

// TestGPUSharedDQKV runs a model whose FFN is 4 x hidden, where dqkv lives
// in dfc's buffer (dqkvInDFC), and the same model with a buffer of its
// own (separateDQKV), for each attention (cuDNN's where it loads, at 128
// positions) with and without ActGradBF16 (dg then in dfc's second half)
// and FuseDY: the losses, logits, gradients and kept FP8 inputs of two
// micro-batches must be the same bits, and the shared model must allocate
// what PredictMemory predicts.
func TestGPUSharedDQKV(t *testing.T) {
	cfg := testShape
	cfg.FFN = 4 * cfg.Hidden
	for _, at := range []Attention{AttentionFlash, AttentionGEMM, AttentionCuDNN} {
		for _, o := range []Options{{}, {ActGradBF16: true, FuseDY: true}} {
			o.Attention = at
			t.Run(fmt.Sprintf("%v/act-grad-bf16=%v/fuse-dy=%v", at, o.ActGradBF16, o.FuseDY), func(t *testing.T) {
				c, seq := cfg, 32
				if at == AttentionCuDNN {
					c.Seq, seq = 128, 128
				}
				r := newRig(t, c, 1e-3, recipes[0].r)
				model := func(separate bool) *Model {
					separateDQKV = separate
					defer func() { separateDQKV = false }()
					m, err := NewWith(r.e, r.k, c, 2, seq, o)
					cudatest.Unavailable(t, err, cudnn.ErrNoLibrary, cudnn.ErrTooOld)
					t.Cleanup(func() { m.Close() })
					return m
				}
				shared := model(false)
				if shared.dqkv != shared.dfc {
					t.Fatalf("FFN %d, hidden %d: dqkv has a buffer of its own", c.FFN, c.Hidden)
				}
				a := twoMicroBatches(t, r, shared)
				memoryMatches(t, r, shared)
				b := twoMicroBatches(t, r, model(true))
				if !bytes.Equal(a.losses, b.losses) || !bytes.Equal(a.logits, b.logits) {
					t.Errorf("losses or logits differ with dqkv in dfc's buffer")
				}
				for _, p := range c.Params() {
					if !bytes.Equal(a.grads[p.Name], b.grads[p.Name]) {
						t.Errorf("the gradient of %s differs with dqkv in dfc's buffer", p.Name)
					}
				}
				for lin, k := range a.kept {
					if !bytes.Equal(k, b.kept[lin]) {
						t.Errorf("the FP8 input %s keeps differs with dqkv in dfc's buffer", lin)
					}
				}
			})
		}
	}
}
