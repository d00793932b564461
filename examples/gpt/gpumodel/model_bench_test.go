package gpumodel

import (
	"testing"

	"github.com/distopt/distopt/examples/gpt/model"
)

// BenchmarkMicroBatch times one training micro-batch (Forward with the
// loss gradient, then Backward accumulating every gradient) of the 124M
// shape (preset "small") at the example's default batch of 4 sequences of
// 1024 tokens, per-tensor current scaling, with the default options, with
// Recompute and with KeepTransposed. It reports tokens/s and the FP8
// linear inputs kept per layer (kept-MiB/layer) with their ratio to
// bfloat16 (kept/bf16). Attention is the reference kernel of gpt.cu.
func BenchmarkMicroBatch(b *testing.B) {
	cfg, err := model.Preset("small")
	if err != nil {
		b.Fatal(err)
	}
	const batch = 4
	r := newRig(b, cfg, 1e-4, recipes[0].r)
	n := batch * cfg.Seq
	tokens, targets := randomTokens(n, cfg.Vocab, 1), randomTokens(n, cfg.Vocab, 2)
	for _, c := range []struct {
		name string
		o    Options
	}{{"default", Options{}}, {"recompute", Options{Recompute: true}}, {"keep-transposed", Options{KeepTransposed: true}}} {
		b.Run(c.name, func(b *testing.B) {
			m, err := NewWith(r.e, r.k, cfg, batch, cfg.Seq, c.o)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			if err := m.ZeroGrads(r.o.Grad); err != nil {
				b.Fatal(err)
			}
			step := func() {
				if err := m.Forward(r.o.Param, tokens, targets, 1); err != nil {
					b.Fatal(err)
				}
				if err := m.Backward(r.o.Param, r.o.Grad, nil); err != nil {
					b.Fatal(err)
				}
				if err := m.s.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			step() // allocates the kept inputs, grows the engine's buffers
			for b.Loop() {
				step()
			}
			rep, err := m.Memory()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(rep.Allocated.LinearInputs)/(1<<20), "kept-MiB/layer")
			b.ReportMetric(rep.Allocated.LinearRatio(), "kept/bf16")
			b.ReportMetric(float64(rep.Allocated.Step())/(1<<20), "activation-MiB/step")
		})
	}
}
