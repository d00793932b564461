package gpumodel

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/cuda/cudatest"
	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/model"
	"github.com/distopt/distopt/fp8"
)

// TestCuDNNOption checks AttentionCuDNN's name, its refusal of head widths
// that are not multiples of 8, and that PredictMemory counts what it
// allocates: the kept output and statistics of the fused kernels, and for
// scratch cuDNN's workspace bound, the bfloat16 score gradient of every
// head (the repeatable backward: sequences padded to 128) and the row sums,
// without the fused kernels' packed heads and row sums, the
// float32 attention output and half of the float32 output gradient
// (bfloat16: cudnnScratch), and with Epilogue dqkv too, whose bfloat16
// half then fits in dfc's buffer and shares it (closed forms written out
// here).
func TestCuDNNOption(t *testing.T) {
	if a, err := ParseAttention("cuDNN"); err != nil || a != AttentionCuDNN || a.String() != "cudnn" {
		t.Errorf("ParseAttention(cuDNN) = %v, %v", a, err)
	}
	cur := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	odd := model.Config{Layers: 1, Hidden: 100, Heads: 4, FFN: 256, Vocab: 256, Seq: 64}
	if _, err := PredictMemory(odd, 2, 64, Options{Recipe: cur, Attention: AttentionCuDNN}); err == nil {
		t.Error("head width 25 with AttentionCuDNN: no error")
	}
	cfg := model.Config{Layers: 3, Hidden: 256, Heads: 4, FFN: 640, Vocab: 256, Seq: 256}
	const batch, seq = 2, 256
	n, rows := batch*seq*cfg.Hidden, batch*cfg.Heads*seq
	for _, o := range []Options{{Recipe: cur}, {Recipe: cur, Epilogue: true}, {Recipe: cur, Unfused: true}, {Recipe: cur, ActGradBF16: true}} {
		flash, err := PredictMemory(cfg, batch, seq, o)
		if err != nil {
			t.Fatal(err)
		}
		o.Attention = AttentionCuDNN
		dnn, err := PredictMemory(cfg, batch, seq, o)
		if err != nil {
			t.Fatal(err)
		}
		wantScratch := flash.Scratch - 4*2*n - 4*rows + // the fused kernels' packed heads and row sums
			64<<20 + 2*rows*seq + 4*rows - // cuDNN's workspace (seq is a multiple of 128)
			4*n - 2*n // no float32 attention output; a bfloat16 output gradient
		if o.Epilogue {
			// dqkv in bfloat16 only, which fits in dfc (FFN 640 x 4 bytes
			// against 3 x 256 x 2) and shares it (dqkvInDFC): none of
			// flash's float32 dqkv is left
			wantScratch -= 4 * 3 * n
		}
		if dnn.Probs != flash.Probs || dnn.Scratch != wantScratch || dnn.LinearInputs != flash.LinearInputs {
			t.Errorf("cudnn %+v: kept %d, scratch %d, linear inputs %d; want %d, %d and %d", o, dnn.Probs, dnn.Scratch, dnn.LinearInputs,
				flash.Probs, wantScratch, flash.LinearInputs)
		}
	}
}

// TestCuDNNLinearTypes checks the element types of the linear layers per
// attention: with AttentionCuDNN attn.proj reads bfloat16 x and float32 dy
// and writes a bfloat16 dx, attn.qkv reads a bfloat16 dy; the other
// layers, and every layer with the other attentions, as before (float32
// x and dy; GELU's bfloat16 gradient for mlp.fc with ActGradBF16).
func TestCuDNNLinearTypes(t *testing.T) {
	cur := fp8.Recipe{Format: fp8.E4M3, Scaling: fp8.TensorCurrent}
	f32, bf16 := buffer.Float32, buffer.BFloat16
	for _, at := range []Attention{AttentionFlash, AttentionGEMM, AttentionCuDNN} {
		for _, act := range []bool{false, true} {
			o := Options{Recipe: cur, Attention: at, ActGradBF16: act}
			for i := range nLinear {
				c, err := linearConfig(testShape, o, i)
				if err != nil {
					t.Fatal(err)
				}
				x, dy, dx := f32, f32, act
				if act && i == fcL {
					dy = bf16
				}
				if i == projL {
					dx = at == AttentionCuDNN
				}
				if at == AttentionCuDNN && i == projL {
					x = bf16
				}
				if at == AttentionCuDNN && i == qkvL {
					dy = bf16
				}
				gotDY := c.GradInput
				if gotDY == 0 {
					gotDY = c.Input
				}
				if c.Input != x || gotDY != dy || o.dgradBF16(i) != dx {
					t.Errorf("%v act-grad-bf16=%v %s: x %v, dy %v, bfloat16 dx %v; want %v, %v, %v",
						at, act, linearNames[i], c.Input, gotDY, o.dgradBF16(i), x, dy, dx)
				}
			}
		}
	}
}

// TestCuDNNTrainsLikeFlash trains the same model from the same weights on
// the same tokens for 30 steps with cuDNN's attention and with the fused
// kernels: the losses must stay within 10% of each other at every step,
// the means of the last 5 within 1%, and fall, as TestGPUTraining's. Both
// round q, k, v, p and the gradients to bfloat16, in other orders, so a
// transient spike's height differs: on 2026-12-05 (H200, cuDNN 9.14.0)
// both runs spiked at step 10 (2.85 to 3.04 with the fused kernels, 2.84
// to 3.28 with cuDNN) and agreed within 1% before and after. cuDNN's
// correctness against the float64 reference is TestAttentionGPU's in
// examples/gpt/cudnn. It skips without a GPU or cuDNN.
func TestCuDNNTrainsLikeFlash(t *testing.T) {
	cfg := testShape
	cfg.Seq = 128
	flash := trainLosses(t, cfg, AttentionFlash)
	dnn := trainLosses(t, cfg, AttentionCuDNN)
	for i := range flash {
		if e := math.Abs(dnn[i]-flash[i]) / flash[i]; !(e < 0.1) {
			t.Errorf("step %d: loss %.5f with cuDNN, %.5f with the fused kernels", i+1, dnn[i], flash[i])
		}
	}
	var md, mf float64
	for i := len(flash) - 5; i < len(flash); i++ {
		md, mf = md+dnn[i]/5, mf+flash[i]/5
	}
	if e := math.Abs(md-mf) / mf; !(e < 0.01) {
		t.Errorf("mean of the last 5 losses %.5f with cuDNN, %.5f with the fused kernels", md, mf)
	}
	if last := dnn[len(dnn)-1]; !(last < dnn[0]/2) {
		t.Errorf("cuDNN: loss %v after %d steps, %v at the first", last, len(dnn), dnn[0])
	}
}

// trainLosses returns the losses of 30 steps of a fresh model of cfg
// with attention at on batch 2 x 128 tokens of a small alphabet.
func trainLosses(t *testing.T, cfg model.Config, at Attention) []float64 {
	const batch, seq = 2, 128
	r := newRig(t, cfg, 3e-3, recipes[0].r)
	m, err := NewWith(r.e, r.k, cfg, batch, seq, Options{Attention: at})
	cudatest.Unavailable(t, err, cudnn.ErrNoLibrary, cudnn.ErrTooOld)
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	tokens := randomTokens(batch*seq, 16, 7)
	targets := append(tokens[1:], tokens[0])
	var losses []float64
	for range 30 {
		steps := []func() error{
			func() error { return r.o.WaitGathers(ctx) },
			func() error { return m.ZeroGrads(r.o.Grad) },
			func() error { return m.Forward(r.o.Param, tokens, targets, 1) },
			func() error { return m.Backward(r.o.Param, r.o.Grad, r.o.GradReady) },
			func() error { _, err := r.o.StepAsync(ctx); return err },
		}
		for _, s := range steps {
			if err := s(); err != nil {
				t.Fatal(err)
			}
		}
		loss, err := m.Loss()
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss)
	}
	t.Logf("%v: losses %.4f", at, losses)
	return losses
}

// TestCuDNNBF16Wiring checks the bfloat16 wiring around cuDNN's attention
// (cudnnLinear) with the per-tensor and 128x128 recipes, on two
// accumulated micro-batches:
//
//   - attn.proj's kept FP8 input equals, code and scale, the fp8
//     package's quantization on the CPU of the bfloat16 output cuDNN kept
//     in each block (read back and widened): the layer reads that output
//     and nothing else;
//   - against the fused kernels' attention on the same weights, the losses
//     within 2% and every gradient within 25% relative L2, the bound each
//     path meets against float64 (modelMatchesCPU): the two attentions
//     round differently in bfloat16, which moves amaxes and so the FP8
//     roundings of every later layer; the paths differ by about the FP8
//     error itself (0.111 at most per-tensor on an H200, 2026-12-05, each
//     0.08-0.10 from float64). A gradient read in the wrong type would be
//     off by orders of magnitude;
//   - against the float64 model, modelMatchesCPU's bounds.
//
// The models have 128 positions: cuDNN before 9.16 needs sequences that
// are multiples of 128. It skips without a GPU or cuDNN.
func TestCuDNNBF16Wiring(t *testing.T) {
	cfg := testShape
	cfg.Seq = 128
	for _, rc := range []int{0, 2} {
		rc := recipes[rc]
		t.Run(rc.name, func(t *testing.T) {
			r := newRig(t, cfg, 1e-3, rc.r)
			m, err := NewWith(r.e, r.k, cfg, 2, 128, Options{Attention: AttentionCuDNN})
			cudatest.Unavailable(t, err, cudnn.ErrNoLibrary, cudnn.ErrTooOld)
			t.Cleanup(func() { m.Close() })
			got := twoMicroBatches(t, r, m)
			checkProjInputs(t, m, got.kept)
			base := twoMicroBatches(t, r, r.model(t, cfg, 2, 128, Options{Attention: AttentionFlash}))
			gl, bl := cuda.View[float32](got.losses), cuda.View[float32](base.losses)
			for i := range bl {
				if e := math.Abs(float64(gl[i]-bl[i])) / math.Abs(float64(bl[i])); !(e < 0.02) {
					t.Errorf("row %d: loss %.5f with cuDNN, %.5f with the fused kernels", i, gl[i], bl[i])
				}
			}
			for _, p := range cfg.Params() {
				if rel := relL2(cuda.View[float32](got.grads[p.Name]), cuda.View[float32](base.grads[p.Name])); !(rel < 0.25) {
					t.Errorf("%s: relative L2 difference %.3f from the fused kernels' attention", p.Name, rel)
				}
			}
			modelMatchesCPU(t, rc.r, Options{Attention: AttentionCuDNN})
		})
	}
}

// checkProjInputs compares attn.proj's kept FP8 input of every block of m
// (kept, by layer name, as keptInputs reads it) with the CPU
// quantization of the bfloat16 attention output the block keeps.
func checkProjInputs(t *testing.T, m *Model, kept map[string][]byte) {
	t.Helper()
	n, h := m.rows, m.cfg.Hidden
	for l := range m.layers {
		o16 := make([]byte, 2*n*h)
		if err := m.s.Download(o16, m.attnOut(&m.layers[l])); err != nil {
			t.Fatal(err)
		}
		v := make([]float32, n*h)
		for i, b := range cuda.View[uint16](o16) {
			v[i] = fp8.Float32FromBF16(b)
		}
		name := lname(l, linearNames[projL])
		want := quantizeRows(v, n, h, m.layers[l].lin[projL].Config().X)
		if !bytes.Equal(kept[name], want) {
			t.Errorf("%s: the kept FP8 input is not the quantization of the bfloat16 attention output", name)
		}
	}
}

// quantizeRows quantizes the row-major rows x cols matrix v on the CPU as
// gemm.Linear keeps it for recipe r, codes then scales: per tensor
// (fp8.ScaleFromAmax of fp8.Amax, fp8.CastScaled) or in 1x128 blocks
// along the rows (fp8.CastBlocks1D; the scale of block j of row i at
// j·rows + i, the Rows128 layout).
func quantizeRows(v []float32, rows, cols int, r fp8.Recipe) []byte {
	codes := make([]byte, rows*cols)
	var scales []float32
	if r.Scaling == fp8.Block1x128 {
		nb := (cols + 127) / 128
		scales = make([]float32, rows*nb)
		inv := make([]float32, nb)
		for i := range rows {
			fp8.CastBlocks1D(codes[i*cols:(i+1)*cols], inv, v[i*cols:(i+1)*cols], 128, r.Format, r.Margin, r.PowerOf2)
			for j, s := range inv {
				scales[j*rows+i] = s
			}
		}
	} else {
		scale, inv := fp8.ScaleFromAmax(fp8.Amax(v), r.Format, r.Margin, r.PowerOf2)
		fp8.CastScaled(codes, v, scale, r.Format)
		scales = []float32{inv}
	}
	for _, s := range scales {
		codes = binary.LittleEndian.AppendUint32(codes, math.Float32bits(s))
	}
	return codes
}

// relL2 returns |got - want| / |want| in the L2 norm.
func relL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

// TestCuDNNMemory is TestGPUMemory with AttentionCuDNN (no float32
// attention output, a bfloat16 output gradient and dqkv in the model's
// buffers: cudnnScratch), fused, with Epilogue, Unfused and ActGradBF16,
// with 128 positions (cuDNN before 9.16 needs multiples of 128). It skips
// without a GPU or cuDNN.
func TestCuDNNMemory(t *testing.T) {
	cfg := testShape
	cfg.Seq = 128
	for _, rc := range recipes[:3] {
		for _, o := range []Options{{}, {Epilogue: true}, {Unfused: true}, {ActGradBF16: true}, {Recompute: true}} {
			o.Attention = AttentionCuDNN
			t.Run(fmt.Sprintf("%s/unfused=%v/recompute=%v/epilogue=%v/act-grad-bf16=%v", rc.name, o.Unfused, o.Recompute, o.Epilogue, o.ActGradBF16), func(t *testing.T) {
				r := newRig(t, cfg, 1e-3, rc.r)
				m, err := NewWith(r.e, r.k, cfg, 2, 128, o)
				cudatest.Unavailable(t, err, cudnn.ErrNoLibrary, cudnn.ErrTooOld)
				t.Cleanup(func() { m.Close() })
				memoryMatches(t, r, m)
			})
		}
	}
}
