package kernels

import "github.com/distopt/distopt/cuda"

// The kernels of gpt.cu: the operations of examples/gpt's GPT-2 style
// decoder that are not matrix products. Activations and gradients are
// float32 but for the kept linear outputs (the _BF16 launchers: written by
// GPTBiasAddBF16, read by GPTGELUBF16 and GPTGELUGradBF16), the parameters
// they read (embeddings, LayerNorm weights and biases, linear biases)
// bfloat16, as the optimizer gathers high-precision parameters. Each launcher's doc names its float64 reference in
// examples/gpt/model; every reduction runs in a fixed order, so results
// repeat bit for bit from run to run. Sizes must be non-negative (they
// panic otherwise); zero rows queue nothing.
const (
	kernelGPTEmbed          = "gpt_embed"
	kernelGPTEmbedGradTok   = "gpt_embed_grad_tokens"
	kernelGPTEmbedGradPos   = "gpt_embed_grad_positions"
	kernelGPTLayerNorm      = "gpt_layernorm"
	kernelGPTLayerNormGradX = "gpt_layernorm_grad_x"
	kernelGPTLayerNormGradW = "gpt_layernorm_grad_wb_partial"
	kernelGPTBiasAdd        = "gpt_bias_add"
	kernelGPTBiasAddBF16    = "gpt_bias_add_bf16"
	kernelGPTBiasResidual   = "gpt_bias_residual"
	kernelGPTColumnSum      = "gpt_column_sum_partial"
	kernelGPTColumnFinal    = "gpt_column_sum_final"
	kernelGPTAdd            = "gpt_add"
	kernelGPTGELU           = "gpt_gelu"
	kernelGPTGELUGrad       = "gpt_gelu_grad"
	kernelGPTGELUBF16       = "gpt_gelu_bf16"
	kernelGPTGELUGradBF16   = "gpt_gelu_grad_bf16"
	kernelGPTCrossEntropy   = "gpt_cross_entropy"
	kernelGPTLinear         = "gpt_linear_bf16"
	kernelGPTLinearGradX    = "gpt_linear_bf16_grad_x"
	kernelGPTLinearGradW    = "gpt_linear_bf16_grad_w"
	kernelGPTRoundBF16      = "gpt_round_bf16"
	kernelGPTRoundBF16Pack  = "gpt_round_bf16_pack"
)

// gptKernels lists the kernels of gpt.cu, gptrows.cu, gptcols.cu and
// gpthead.cu.
func gptKernels() []string {
	names := []string{kernelGPTEmbed, kernelGPTEmbedGradTok, kernelGPTEmbedGradPos, kernelGPTLayerNorm,
		kernelGPTLayerNormGradX, kernelGPTLayerNormGradW, kernelGPTBiasAdd, kernelGPTColumnSum, kernelGPTColumnFinal,
		kernelGPTAdd, kernelGPTGELU, kernelGPTGELUGrad, kernelGPTCrossEntropy,
		kernelGPTBiasAddBF16, kernelGPTBiasResidual, kernelGPTGELUBF16, kernelGPTGELUGradBF16,
		kernelGPTLinear, kernelGPTLinearGradX, kernelGPTLinearGradW, kernelGPTRoundBF16, kernelGPTRoundBF16Pack}
	for _, v := range rowVariants {
		for _, base := range []string{kernelGPTLayerNorm, kernelGPTLayerNormGradX, kernelGPTCrossEntropy} {
			names = append(names, base+v.suffix)
		}
	}
	return names
}

// warpRows queues a kernel that takes one warp per row.
func (k *Set) warpRows(s *cuda.Stream, name string, rows int, args *cuda.Args) error {
	if !checkLen(name, rows) {
		return nil
	}
	return k.launch1D(s, name, 32*rows, 1, args)
}

// elementwise queues a grid-stride kernel over n items.
func (k *Set) elementwise(s *cuda.Stream, name string, n int, args *cuda.Args) error {
	if !checkLen(name, n) {
		return nil
	}
	return k.launch1D(s, name, n, 1, args)
}

// GPTEmbed queues x[r, i] = wte[tok[r], i] + wpe[r mod seq, i] for r < rows,
// i < h (model.Embed): x float32 [rows, h], wte and wpe bfloat16, tok int32
// tokens, each below wte's rows (not checked).
func (k *Set) GPTEmbed(s *cuda.Stream, x, wte, wpe, tok cuda.DevicePtr, rows, seq, h int) error {
	if !checkLen(kernelGPTEmbed, rows) || !checkLen(kernelGPTEmbed, h) {
		return nil
	}
	blocks := min(rows, 2*blocksPerSM*max(k.sms, 1))
	return k.launchGrid(s, kernelGPTEmbed, cuda.Dim3{X: uint32(blocks)}, blockSize, new(cuda.Args).Ptr(x).Ptr(wte).
		Ptr(wpe).Ptr(tok).U64(uint64(rows)).U64(uint64(seq)).U64(uint64(h)))
}

// GPTEmbedGradTokens queues dwte[v, i] += Σ dx[r, i] over the rows r in
// order[start[v]:start[v+1]], in that order (the token part of
// model.EmbedBackward): order and start (vocab+1 entries) are int32, the
// rows of each token increasing, as TokenRows builds them on the host.
// Summing without atomics, in a fixed order (gptcols.cu), keeps the result
// the same from run to run.
func (k *Set) GPTEmbedGradTokens(s *cuda.Stream, dwte, dx, order, start cuda.DevicePtr, vocab, h int) error {
	if !checkLen(kernelGPTEmbedGradTok, vocab) || !checkLen(kernelGPTEmbedGradTok, h) {
		return nil
	}
	grid := cuda.Dim3{X: uint32(vocab), Y: uint32(ceilDiv(h, embCols))}
	if err := gridFits(kernelGPTEmbedGradTok, grid); err != nil {
		return err
	}
	return k.launchGrid(s, kernelGPTEmbedGradTok, grid, 32*embWarps, new(cuda.Args).Ptr(dwte).Ptr(dx).Ptr(order).
		Ptr(start).U64(uint64(vocab)).U64(uint64(h)))
}

// TokenRows returns, for tokens below vocab, the rows holding each token
// (order, increasing within a token) and where each token's rows start
// (start[v] to start[v+1]): the input of GPTEmbedGradTokens. It panics on
// a token outside [0, vocab).
func TokenRows(tokens []int32, vocab int) (order, start []int32) {
	start = make([]int32, vocab+1)
	for _, t := range tokens {
		start[t+1]++
	}
	for v := range vocab {
		start[v+1] += start[v]
	}
	next := append([]int32(nil), start[:vocab]...)
	order = make([]int32, len(tokens))
	for r, t := range tokens {
		order[next[t]] = int32(r)
		next[t]++
	}
	return order, start
}

// GPTEmbedGradPositions queues dwpe[t, i] += Σ_b dx[b·seq + t, i] (the
// position part of model.EmbedBackward), b increasing.
func (k *Set) GPTEmbedGradPositions(s *cuda.Stream, dwpe, dx cuda.DevicePtr, batch, seq, h int) error {
	return k.elementwise(s, kernelGPTEmbedGradPos, seq*h, new(cuda.Args).Ptr(dwpe).Ptr(dx).
		U64(uint64(batch)).U64(uint64(seq)).U64(uint64(h)))
}

// GPTLayerNorm queues model.LayerNorm in float32 with bfloat16 w and b:
// y, mean and rstd ([rows]) from x [rows, n].
func (k *Set) GPTLayerNorm(s *cuda.Stream, y, mean, rstd, x, w, b cuda.DevicePtr, rows, n int, eps float32) error {
	name := kernelGPTLayerNorm + rowVariant(n, []cuda.DevicePtr{y, x}, []cuda.DevicePtr{w, b})
	return k.warpRows(s, name, rows, new(cuda.Args).Ptr(y).Ptr(mean).Ptr(rstd).Ptr(x).Ptr(w).Ptr(b).
		U64(uint64(rows)).U64(uint64(n)).F32(eps))
}

// GPTLayerNormGradX queues the dx part of model.LayerNormBackward:
// dx += rstd·(dy·w - mean(dy·w) - xhat·mean(dy·w·xhat)).
func (k *Set) GPTLayerNormGradX(s *cuda.Stream, dx, dy, x, mean, rstd, w cuda.DevicePtr, rows, n int) error {
	name := kernelGPTLayerNormGradX + rowVariant(n, []cuda.DevicePtr{dx, dy, x}, []cuda.DevicePtr{w})
	return k.warpRows(s, name, rows, new(cuda.Args).Ptr(dx).Ptr(dy).Ptr(x).Ptr(mean).Ptr(rstd).
		Ptr(w).U64(uint64(rows)).U64(uint64(n)))
}

// GPTLayerNormGradWB queues the dw and db part of model.LayerNormBackward
// (float32, accumulated): dw += Σ_r dy·xhat, db += Σ_r dy, summed in the
// fixed two-pass order of gptcols.cu through the stream's scratch.
func (k *Set) GPTLayerNormGradWB(s *cuda.Stream, dw, db, dy, x, mean, rstd cuda.DevicePtr, rows, n int) error {
	return k.columnSums(s, kernelGPTLayerNormGradW, dw, db, rows, n, func(part cuda.DevicePtr) *cuda.Args {
		return new(cuda.Args).Ptr(part).Ptr(dy).Ptr(x).Ptr(mean).Ptr(rstd).U64(uint64(rows)).U64(uint64(n))
	})
}

// GPTBiasAdd queues y[r, i] += b[i] (float32 y [rows, n], bfloat16 b).
func (k *Set) GPTBiasAdd(s *cuda.Stream, y, b cuda.DevicePtr, rows, n int) error {
	return k.elementwise(s, kernelGPTBiasAdd, rows*n, new(cuda.Args).Ptr(y).Ptr(b).U64(uint64(rows)).U64(uint64(n)))
}

// GPTBiasResidual queues y[r, i] = (y[r, i] + b[i]) + x[r, i] (float32 y
// and x [rows, n], bfloat16 b): a linear layer's bias and the residual
// connection in one pass, the bits of GPTBiasAdd then GPTAdd. y must not
// overlap x.
func (k *Set) GPTBiasResidual(s *cuda.Stream, y, x, b cuda.DevicePtr, rows, n int) error {
	return k.elementwise(s, kernelGPTBiasResidual, rows*n, new(cuda.Args).Ptr(y).Ptr(x).Ptr(b).U64(uint64(rows)).U64(uint64(n)))
}

// GPTBiasAddBF16 queues y[r, i] = bf16(x[r, i] + b[i]): the float32 sum of
// a float32 x [rows, n] (a linear layer's product) and a bfloat16 bias,
// rounded to the nearest bfloat16 (ties to even) into y [rows, n]: the
// linear outputs the GPT model keeps in bfloat16 (model.RoundBF16 of the
// float32 sum). y must not overlap x.
func (k *Set) GPTBiasAddBF16(s *cuda.Stream, y, x, b cuda.DevicePtr, rows, n int) error {
	return k.elementwise(s, kernelGPTBiasAddBF16, rows*n, new(cuda.Args).Ptr(y).Ptr(x).Ptr(b).U64(uint64(rows)).U64(uint64(n)))
}

// GPTColumnSum queues db[i] += Σ_r dy[r, i] (a bias gradient), summed in
// the fixed two-pass order of gptcols.cu through the stream's scratch.
func (k *Set) GPTColumnSum(s *cuda.Stream, db, dy cuda.DevicePtr, rows, n int) error {
	return k.columnSums(s, kernelGPTColumnSum, db, 0, rows, n, func(part cuda.DevicePtr) *cuda.Args {
		return new(cuda.Args).Ptr(part).Ptr(dy).U64(uint64(rows)).U64(uint64(n))
	})
}

// GPTAdd queues y[i] = a[i] + b[i] for i < n (float32; y may be a or b).
func (k *Set) GPTAdd(s *cuda.Stream, y, a, b cuda.DevicePtr, n int) error {
	return k.elementwise(s, kernelGPTAdd, n, new(cuda.Args).Ptr(y).Ptr(a).Ptr(b).U64(uint64(n)))
}

// GPTGELU queues y = model.GELU(x) in float32 (tanh approximation).
func (k *Set) GPTGELU(s *cuda.Stream, y, x cuda.DevicePtr, n int) error {
	return k.elementwise(s, kernelGPTGELU, n, new(cuda.Args).Ptr(y).Ptr(x).U64(uint64(n)))
}

// GPTGELUGrad queues dx = dy·GELU'(x) (model.GELUBackward) in float32.
func (k *Set) GPTGELUGrad(s *cuda.Stream, dx, dy, x cuda.DevicePtr, n int) error {
	return k.elementwise(s, kernelGPTGELUGrad, n, new(cuda.Args).Ptr(dx).Ptr(dy).Ptr(x).U64(uint64(n)))
}

// GPTGELUBF16 queues y = model.GELU(x) for a bfloat16 x, y float32.
func (k *Set) GPTGELUBF16(s *cuda.Stream, y, x cuda.DevicePtr, n int) error {
	return k.elementwise(s, kernelGPTGELUBF16, n, new(cuda.Args).Ptr(y).Ptr(x).U64(uint64(n)))
}

// GPTGELUGradBF16 queues dx = dy·GELU'(x) (model.GELUBackward) for a
// bfloat16 x, dx and dy float32.
func (k *Set) GPTGELUGradBF16(s *cuda.Stream, dx, dy, x cuda.DevicePtr, n int) error {
	return k.elementwise(s, kernelGPTGELUGradBF16, n, new(cuda.Args).Ptr(dx).Ptr(dy).Ptr(x).U64(uint64(n)))
}

// GPTCrossEntropy queues, for each row r of logits [rows, v] (float32)
// and int32 target: loss[r] = logsumexp(logits[r]) - logits[r, target[r]];
// and, unless dlogits is 0, dlogits = coef·(softmax(logits[r]) -
// onehot(target[r])) (model.CrossEntropyBackward with coef = dloss/rows;
// dlogits may be logits).
func (k *Set) GPTCrossEntropy(s *cuda.Stream, loss, dlogits, logits, target cuda.DevicePtr, rows, v int, coef float32) error {
	name := kernelGPTCrossEntropy + rowVariant(v, []cuda.DevicePtr{dlogits, logits}, nil)
	return k.warpRows(s, name, rows, new(cuda.Args).Ptr(loss).Ptr(dlogits).Ptr(logits).Ptr(target).
		U64(uint64(rows)).U64(uint64(v)).F32(coef))
}

// GPTLinearBF16 queues y = x·wᵀ (model.Linear without bias) for float32 x
// [rows, in] and a bfloat16 weight w [out, in]: the tied output head,
// whose weight is the high-precision token embedding. A tiled float32
// GEMM (gpthead.cu); each output sums its products in index order.
func (k *Set) GPTLinearBF16(s *cuda.Stream, y, x, w cuda.DevicePtr, rows, in, out int) error {
	if !checkLen(kernelGPTLinear, rows) || !checkLen(kernelGPTLinear, out) {
		return nil
	}
	return k.headGEMM(s, kernelGPTLinear, out, rows, 1, new(cuda.Args).Ptr(y).Ptr(x).Ptr(w).
		U64(uint64(rows)).U64(uint64(in)).U64(uint64(out)))
}

// GPTLinearBF16Grad queues the gradients of GPTLinearBF16 (model.LinearBackward
// without bias), accumulated in float32: dx += dy·w unless dx is 0 (each
// element summed over o in order), and dw += dyᵀ·x unless dw is 0 (rows
// summed in slices of fixed bounds, the slices then added in order through
// the stream's scratch).
func (k *Set) GPTLinearBF16Grad(s *cuda.Stream, dx, dw, dy, x, w cuda.DevicePtr, rows, in, out int) error {
	if !checkLen(kernelGPTLinearGradX, rows) || !checkLen(kernelGPTLinearGradX, in) || !checkLen(kernelGPTLinearGradX, out) {
		return nil
	}
	if dx != 0 {
		if err := k.headGEMM(s, kernelGPTLinearGradX, in, rows, 1, new(cuda.Args).Ptr(dx).Ptr(dy).Ptr(w).
			U64(uint64(rows)).U64(uint64(in)).U64(uint64(out))); err != nil {
			return err
		}
	}
	if dw == 0 {
		return nil
	}
	slices, slice := k.headSlices(rows, in, out)
	part := cuda.DevicePtr(0)
	if slices > 1 {
		var err error
		if part, err = k.scratch(s, 4*slices*out*in); err != nil {
			return err
		}
	}
	if err := k.headGEMM(s, kernelGPTLinearGradW, in, out, slices, new(cuda.Args).Ptr(dw).Ptr(part).Ptr(dy).Ptr(x).
		U64(uint64(rows)).U64(uint64(in)).U64(uint64(out)).U64(uint64(slice))); err != nil {
		return err
	}
	if slices == 1 {
		return nil
	}
	return k.elementwise(s, kernelGPTColumnFinal, out*in, new(cuda.Args).Ptr(dw).Ptr(0).Ptr(part).
		U64(uint64(slices)).U64(uint64(out*in)))
}

// GPTRoundBF16 queues y[i] = bf16(x[i]) for i < n, float32 in and out: x
// rounded to the nearest bfloat16 (ties to even; overflow to ±Inf, NaN
// stays NaN) and widened back (model.RoundBF16 of float32 values); with
// add, y[i] += bf16(x[i]) instead. The roundings of the output head under
// PyTorch's BF16 autocast (examples/gpt -head bf16). y may be x when add
// is false.
func (k *Set) GPTRoundBF16(s *cuda.Stream, y, x cuda.DevicePtr, n int, add bool) error {
	a := uint32(0)
	if add {
		a = 1
	}
	return k.elementwise(s, kernelGPTRoundBF16, n, new(cuda.Args).Ptr(y).Ptr(x).U64(uint64(n)).U32(a))
}

// GPTRoundBF16Pack queues GPTRoundBF16 of x into y (which may be x) and
// also writes the bfloat16 codes to y16 (n 2-byte elements), the same
// rounding: the input of a product on the tensor cores.
func (k *Set) GPTRoundBF16Pack(s *cuda.Stream, y, y16, x cuda.DevicePtr, n int) error {
	return k.elementwise(s, kernelGPTRoundBF16Pack, n, new(cuda.Args).Ptr(y).Ptr(y16).Ptr(x).U64(uint64(n)))
}
