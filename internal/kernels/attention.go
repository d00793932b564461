package kernels

import (
	"fmt"

	"github.com/distopt/distopt/internal/cuda"
)

// The kernels of attention.cu: the causal softmax of attention computed
// with batched GEMMs, and its gradient, over n row-major float32 matrices
// [t, t] (one per batch and head). Row i reads columns j <= i only and
// writes the whole row, zeros above the diagonal. One warp per row; sums
// in a fixed order, so results repeat bit for bit. The launchers take the
// float4 kernels when t is a multiple of 4 and every pointer is 16-byte
// aligned. Sizes must be non-negative (they panic otherwise); zero
// matrices or t = 0 queue nothing.
const (
	kernelAttnSoftmax      = "attn_softmax"
	kernelAttnSoftmax4     = "attn_softmax4"
	kernelAttnSoftmaxGrad  = "attn_softmax_grad"
	kernelAttnSoftmaxGrad4 = "attn_softmax_grad4"
	kernelAttnSplitHeads   = "attn_split_heads"
	kernelAttnMergeHeads   = "attn_merge_heads"
)

// attentionKernels lists the kernels of attention.cu.
func attentionKernels() []string {
	return []string{kernelAttnSoftmax, kernelAttnSoftmax4, kernelAttnSoftmaxGrad, kernelAttnSoftmaxGrad4,
		kernelAttnSplitHeads, kernelAttnMergeHeads}
}

// vec4 reports whether rows of t float32 starting at every pointer in ps
// can be read as float4.
func vec4(t int, ps ...cuda.DevicePtr) bool {
	if t%4 != 0 {
		return false
	}
	for _, p := range ps {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

// AttentionSoftmax queues model.CausalSoftmax in float32 over n matrices
// [t, t] of scores into p (p may be scores): p[i, j] = exp(scale·s[i, j] -
// m_i) / Σ_{k≤i} exp(scale·s[i, k] - m_i) for j ≤ i, 0 above the diagonal,
// m_i the row's maximum of scale·s over k ≤ i. Scores above the diagonal
// are not read. Each lane keeps a running maximum and sum (an online
// softmax), merged over the warp in butterfly order.
func (k *Set) AttentionSoftmax(s *cuda.Stream, p, scores cuda.DevicePtr, n, t int, scale float32) error {
	name := kernelAttnSoftmax
	if vec4(t, p, scores) {
		name = kernelAttnSoftmax4
	}
	if !checkLen(name, n) || !checkLen(name, t) {
		return nil
	}
	return k.warpRows(s, name, n*t, new(cuda.Args).Ptr(p).Ptr(scores).U64(uint64(n)).U64(uint64(t)).F32(scale))
}

// AttentionSoftmaxGrad queues model.CausalSoftmaxBackward in float32: ds
// from the probabilities p of AttentionSoftmax and their gradient dp (ds
// may be dp): ds[i, j] = scale·p[i, j]·(dp[i, j] - Σ_{k≤i} p[i, k]·dp[i, k])
// for j ≤ i, 0 above the diagonal (p and dp there are not read).
func (k *Set) AttentionSoftmaxGrad(s *cuda.Stream, ds, p, dp cuda.DevicePtr, n, t int, scale float32) error {
	name := kernelAttnSoftmaxGrad
	if vec4(t, ds, p, dp) {
		name = kernelAttnSoftmaxGrad4
	}
	if !checkLen(name, n) || !checkLen(name, t) {
		return nil
	}
	return k.warpRows(s, name, n*t, new(cuda.Args).Ptr(ds).Ptr(p).Ptr(dp).U64(uint64(n)).U64(uint64(t)).F32(scale))
}

// HeadLayout describes where the heads of an attention layer lie in a
// row-major activation of batch·seq rows of LD float32: head k of row
// (b, t) in columns Off + k·D .. Off + k·D + D - 1 of row b·Seq + t.
type HeadLayout struct {
	Batch, Seq, Heads, D int
	LD, Off              int
}

// headKernel queues one of the layout kernels, one block per row.
func (k *Set) headKernel(s *cuda.Stream, name string, dst, src cuda.DevicePtr, l HeadLayout) error {
	if l.Batch < 0 || l.Seq < 0 || l.Heads < 0 || l.D < 0 || l.Off < 0 || l.LD < l.Off+l.Heads*l.D {
		panic(fmt.Sprintf("kernels: %s of %+v", name, l))
	}
	if l.Heads*l.D >= 1<<31 {
		panic(fmt.Sprintf("kernels: %s: rows of %d columns", name, l.Heads*l.D))
	}
	rows := l.Batch * l.Seq
	if rows == 0 || l.Heads*l.D == 0 {
		return nil
	}
	blocks := min(rows, blocksPerSM*max(k.sms, 1))
	return s.Launch(k.function(name), cuda.Dim3{X: uint32(blocks)}, cuda.Dim3{X: blockSize}, 0, new(cuda.Args).
		Ptr(dst).Ptr(src).U64(uint64(l.Batch)).U64(uint64(l.Seq)).U64(uint64(l.Heads)).U64(uint64(l.D)).
		U64(uint64(l.LD)).U64(uint64(l.Off)))
}

// AttentionSplitHeads queues the copy of the heads that l places in src
// into dst, packed as [batch, heads, seq, d]: dst[((b·heads + k)·seq + t)·d
// + c] = src[(b·seq + t)·LD + Off + k·D + c]. Exact.
func (k *Set) AttentionSplitHeads(s *cuda.Stream, dst, src cuda.DevicePtr, l HeadLayout) error {
	return k.headKernel(s, kernelAttnSplitHeads, dst, src, l)
}

// AttentionMergeHeads is the inverse of AttentionSplitHeads: the packed
// heads of src go to the columns l names in dst; dst's other columns are
// not written.
func (k *Set) AttentionMergeHeads(s *cuda.Stream, dst, src cuda.DevicePtr, l HeadLayout) error {
	return k.headKernel(s, kernelAttnMergeHeads, dst, src, l)
}
