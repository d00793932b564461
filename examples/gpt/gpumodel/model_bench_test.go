package gpumodel

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/gemm"
)

var benchPresets = flag.String("gpt.presets", "small", "comma-separated model presets of BenchmarkMicroBatch")

// fastInit fills the weights with a cheap deterministic pattern of
// magnitude up to 0.02 (LayerNorm weights 1, biases 0 are not needed for
// timing): Box-Muller over the 1.3B shape's parameters would take longer
// than the benchmark.
func fastInit(name string, offset int, dst []float32) error {
	for i := range dst {
		dst[i] = 0.02 * float32(int((uint64(offset+i)*2654435761)%2001)-1000) / 1000
	}
	return nil
}

// BenchmarkMicroBatch times one training micro-batch (Forward with the
// loss gradient, then Backward accumulating every gradient) of each preset
// of -gpt.presets (default the 124M shape, "small") at the example's
// default batch of 4 sequences of the full context, per-tensor current
// scaling, with the default options (flash attention, the fused forward),
// with Unfused (the same with the forward's and backward's element-wise
// kernels unfused: flash/unfused over unfused/… tokens/s is the fusion's
// gain), with ActGradBF16 (act-grad-bf16: bfloat16 activation gradients),
// with the GEMM attention (AttentionGEMM), with Recompute (unfused
// forward), with KeepTransposed, with Epilogue (qkv's and fc's biases in
// the GEMMs' epilogue: epilogue over flash tokens/s is its gain) and with
// AttentionCuDNN (cudnn: cuDNN's fused attention in place of the fused
// kernels; skipped, with the reason, where cuDNN cannot be loaded), with
// FuseDY (fuse-dy: the output gradients cast, transposed and summed in
// one pass), each
// with an engine of its own. backward.go counts the element-wise bytes of
// backward per block: 265, 241 and 189 x tokens x hidden for unfused,
// flash and act-grad-bf16, which the measured times can be set against.
// It reports tokens/s;
// the FP8 linear inputs kept per layer (kept-MiB/layer) with their ratio
// to bfloat16 (kept/bf16); the activation memory of the step as the model
// allocated it (activation-MiB/step: Memory's Allocated.Step), as
// PredictMemory predicts it (predicted-MiB/step), and the device
// allocator's count of the model's own allocations (device-MiB, the same
// without the engine's buffer).
func BenchmarkMicroBatch(b *testing.B) {
	for _, preset := range strings.Split(*benchPresets, ",") {
		cfg, err := model.Preset(preset)
		if err != nil {
			b.Fatal(err)
		}
		const batch = 4
		r := newRigInit(b, cfg, 1e-4, recipes[0].r, fastInit)
		n := batch * cfg.Seq
		tokens, targets := randomTokens(n, cfg.Vocab, 1), randomTokens(n, cfg.Vocab, 2)
		for _, c := range []struct {
			name string
			o    Options
		}{{"flash", Options{}}, {"unfused", Options{Unfused: true}}, {"act-grad-bf16", Options{ActGradBF16: true}}, {"gemm", Options{Attention: AttentionGEMM}},
			{"recompute", Options{Recompute: true}}, {"keep-transposed", Options{KeepTransposed: true}}, {"epilogue", Options{Epilogue: true}},
			{"cudnn", Options{Attention: AttentionCuDNN}}, {"fuse-dy", Options{FuseDY: true}}} {
			b.Run(preset+"/"+c.name, func(b *testing.B) {
				e, err := gemm.New(r.be.Device(), r.be.Stream())
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				m, err := NewWith(e, r.k, cfg, batch, cfg.Seq, c.o)
				if errors.Is(err, cudnn.ErrNoLibrary) || errors.Is(err, cudnn.ErrTooOld) {
					b.Skipf("cuDNN cannot be loaded: %v", err)
				}
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				benchSteps(b, r, m, tokens, targets)
			})
		}
	}
}

// benchSteps times Forward and Backward of m and reports the figures of
// BenchmarkMicroBatch.
func benchSteps(b *testing.B, r *rig, m *Model, tokens, targets []int32) {
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
	const mib = 1 << 20
	b.ReportMetric(float64(len(tokens))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(rep.Allocated.LinearInputs)/mib, "kept-MiB/layer")
	b.ReportMetric(rep.Allocated.LinearRatio(), "kept/bf16")
	b.ReportMetric(float64(rep.Allocated.PerLayer())/mib, "layer-MiB")
	b.ReportMetric(float64(rep.Allocated.Step())/mib, "activation-MiB/step")
	b.ReportMetric(float64(rep.Predicted.Step())/mib, "predicted-MiB/step")
	b.ReportMetric(float64(rep.Device)/mib, "device-MiB")
}
