package model

import "time"

// Rates are the speeds a step's floor is computed at: the FP8 GEMMs'
// FLOP/s, the fused causal attention's forward and backward FLOP/s
// (counting the causal half of the square), and the memory bandwidth
// (bytes read plus written per second) of the memory-bound work.
type Rates struct {
	GEMM, AttentionForward, AttentionBackward, Bandwidth float64
}

// H200Rates are the rates measured on one H200 (docs/BENCHMARKS.md): FP8
// per-tensor GEMMs of the 1.3B shapes at 1234-1433 TFLOP/s (1300 taken),
// cuDNN's fused attention at that shape 455 and 330 TFLOP/s, and a
// device-to-device copy at 4270 GB/s.
var H200Rates = Rates{GEMM: 1300e12, AttentionForward: 455e12, AttentionBackward: 330e12, Bandwidth: 4270e9}

// Floor is the time one training step cannot beat on a GPU of the given
// Rates, by part, for the work done at the step's ideal: every linear
// layer an FP8 GEMM, attention one fused kernel each way, the memory-bound
// work fused into the fewest passes (ElementwiseBytes), and the optimizer
// update at UpdateBytes per parameter.
type Floor struct {
	GEMM, Attention, Elementwise, Update time.Duration
}

// Total is the sum of the parts: the floor of a step whose parts do not
// overlap (they depend on each other in order).
func (f Floor) Total() time.Duration { return f.GEMM + f.Attention + f.Elementwise + f.Update }

// UpdateBytes is the bytes per parameter the fused update moves at least
// with float32 masters and moments and bfloat16 gradients: master, m and v
// read and written (24), the gradient read (2), and the FP8 copy written
// (1, rounded into the 26 the update kernel's table gives with its
// scales).
const UpdateBytes = 26

// GEMMFlops is the FLOPs of the step's matrix products over tokens: each
// linear layer (in x out) and the tied head (Hidden x Vocab) three times,
// forward, input gradient and weight gradient, 2 x tokens x in x out each.
func (c Config) GEMMFlops(tokens int) float64 {
	t, h, f := float64(tokens), float64(c.Hidden), float64(c.FFN)
	shapes := [][2]float64{{h, 3 * h}, {h, h}, {h, f}, {f, h}} // qkv, proj, fc, mlp proj
	var layer float64
	for _, s := range shapes {
		layer += 3 * 2 * t * s[0] * s[1]
	}
	return float64(c.Layers)*layer + 3*2*t*h*float64(c.Vocab)
}

// AttentionFlops is the FLOPs of causal attention over batch sequences of
// c.Seq tokens, forward and backward: per layer and head, the scores
// (Seq x Seq x HeadDim) and their product with the values, 2 FLOPs per
// multiply-add, over the causal half; the backward recomputes the scores
// and takes four products, 2.5 times the forward's.
func (c Config) AttentionFlops(batch int) (forward, backward float64) {
	s := float64(c.Seq)
	forward = float64(c.Layers*batch*c.Heads) * 2 * 2 * s * s * float64(c.HeadDim()) / 2
	return forward, 2.5 * forward
}

// ElementwiseBytes is the bytes per token the memory-bound work of a step
// moves at least, with the residual stream and the saved activations in
// bfloat16 and the GEMM inputs in FP8: per layer, forward, the two
// LayerNorms (read 2H, write H each), the attention output and the GELU
// each quantized (read 2 bytes, write 1: 3H and 3F); the backward reads
// and writes about twice that (the saved input and the incoming gradient
// read, the gradient written in BF16 and FP8). Bias and residual adds ride
// in the GEMM epilogues.
func (c Config) ElementwiseBytes() float64 {
	h, f := float64(c.Hidden), float64(c.FFN)
	forward := 3*h + 3*h + 3*h + 3*f
	return float64(c.Layers) * 3 * forward
}

// Floor returns the floor of a step of batch sequences of c.Seq tokens at
// rates r.
func (c Config) Floor(batch int, r Rates) Floor {
	tokens := batch * c.Seq
	fwd, bwd := c.AttentionFlops(batch)
	sec := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	return Floor{
		GEMM:        sec(c.GEMMFlops(tokens) / r.GEMM),
		Attention:   sec(fwd/r.AttentionForward + bwd/r.AttentionBackward),
		Elementwise: sec(c.ElementwiseBytes() * float64(tokens) / r.Bandwidth),
		Update:      sec(UpdateBytes * float64(c.NumParams()) / r.Bandwidth),
	}
}
