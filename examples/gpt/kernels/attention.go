package kernels

import (
	"fmt"

	"github.com/distopt/distopt/cuda"
)

// The kernels of attention.cu, for attention computed with batched GEMMs:
// the causal softmax and its gradient over n row-major matrices [t, t]
// (one per batch and head), in float32 or with the probabilities and the
// gradient in bfloat16; and the copies of the heads between the model's
// row-major activations and the packed [batch, heads, seq, d] layout. Row
// i of a softmax reads columns j <= i only and writes the whole row, zeros
// above the diagonal. One warp per row; sums in a fixed order, so results
// repeat bit for bit. The launchers take the vector kernels (four
// elements at a time) when t is a multiple of 4 and the pointers are
// aligned (16 bytes for float32, 8 for bfloat16). Sizes must be
// non-negative (they panic otherwise); zero matrices or t = 0 queue
// nothing.
const (
	kernelAttnSoftmax      = "attn_softmax"
	kernelAttnSoftmax4     = "attn_softmax4"
	kernelAttnSoftmaxGrad  = "attn_softmax_grad"
	kernelAttnSoftmaxGrad4 = "attn_softmax_grad4"
	kernelAttnSplitHeads   = "attn_split_heads"
	kernelAttnMergeHeads   = "attn_merge_heads"

	kernelAttnSoftmaxBF16      = "attn_softmax_bf16"
	kernelAttnSoftmax4BF16     = "attn_softmax4_bf16"
	kernelAttnSoftmaxGradBF16  = "attn_softmax_grad_bf16"
	kernelAttnSoftmaxGrad4BF16 = "attn_softmax_grad4_bf16"
	kernelAttnSplitHeadsBF16   = "attn_split_heads_bf16"
	kernelAttnSplitFromBF16    = "attn_split_heads_from_bf16"
	kernelAttnSplitBF16ToBF16  = "attn_split_heads_bf16_from_bf16"
)

// attentionKernels lists the kernels of attention.cu.
func attentionKernels() []string {
	return []string{kernelAttnSoftmax, kernelAttnSoftmax4, kernelAttnSoftmaxGrad, kernelAttnSoftmaxGrad4,
		kernelAttnSplitHeads, kernelAttnMergeHeads, kernelAttnSoftmaxBF16, kernelAttnSoftmax4BF16,
		kernelAttnSoftmaxGradBF16, kernelAttnSoftmaxGrad4BF16, kernelAttnSplitHeadsBF16, kernelAttnSplitFromBF16,
		kernelAttnSplitBF16ToBF16}
}

// vec4 reports whether rows of t elements starting at every pointer in ps
// can be accessed four elements at a time, the pointers being aligned to
// align bytes (16 for float32, 8 for bfloat16).
func vec4(t, align int, ps ...cuda.DevicePtr) bool {
	if t%4 != 0 {
		return false
	}
	for _, p := range ps {
		if int(p%cuda.DevicePtr(align)) != 0 {
			return false
		}
	}
	return true
}

// softmaxLaunch queues one of the softmax kernels: scalar, or the float4
// variant v4 when vec says so.
func (k *Set) softmaxLaunch(s *cuda.Stream, scalar, v4 string, vec bool, n, t int, args *cuda.Args) error {
	name := scalar
	if vec {
		name = v4
	}
	if !checkLen(name, n) || !checkLen(name, t) {
		return nil
	}
	return k.warpRows(s, name, n*t, args)
}

// AttentionSoftmax queues model.CausalSoftmax in float32 over n matrices
// [t, t] of scores into p (p may be scores): p[i, j] = exp(scale·s[i, j] -
// m_i) / Σ_{k≤i} exp(scale·s[i, k] - m_i) for j ≤ i, 0 above the diagonal,
// m_i the row's maximum of scale·s over k ≤ i. Scores above the diagonal
// are not read. Each lane keeps a running maximum and sum (an online
// softmax), merged over the warp in butterfly order.
func (k *Set) AttentionSoftmax(s *cuda.Stream, p, scores cuda.DevicePtr, n, t int, scale float32) error {
	return k.softmaxLaunch(s, kernelAttnSoftmax, kernelAttnSoftmax4, vec4(t, 16, p, scores), n, t,
		new(cuda.Args).Ptr(p).Ptr(scores).U64(uint64(n)).U64(uint64(t)).F32(scale))
}

// AttentionSoftmaxBF16 is AttentionSoftmax with p in bfloat16 (each
// probability computed in float32, then rounded to nearest even); p must
// not overlap scores.
func (k *Set) AttentionSoftmaxBF16(s *cuda.Stream, p, scores cuda.DevicePtr, n, t int, scale float32) error {
	return k.softmaxLaunch(s, kernelAttnSoftmaxBF16, kernelAttnSoftmax4BF16, vec4(t, 16, scores) && vec4(t, 8, p), n, t,
		new(cuda.Args).Ptr(p).Ptr(scores).U64(uint64(n)).U64(uint64(t)).F32(scale))
}

// AttentionSoftmaxGrad queues model.CausalSoftmaxBackward in float32: ds
// from the probabilities p of AttentionSoftmax and their gradient dp (ds
// may be dp): ds[i, j] = scale·p[i, j]·(dp[i, j] - Σ_{k≤i} p[i, k]·dp[i, k])
// for j ≤ i, 0 above the diagonal (p and dp there are not read).
func (k *Set) AttentionSoftmaxGrad(s *cuda.Stream, ds, p, dp cuda.DevicePtr, n, t int, scale float32) error {
	return k.softmaxLaunch(s, kernelAttnSoftmaxGrad, kernelAttnSoftmaxGrad4, vec4(t, 16, ds, p, dp), n, t,
		new(cuda.Args).Ptr(ds).Ptr(p).Ptr(dp).U64(uint64(n)).U64(uint64(t)).F32(scale))
}

// AttentionSoftmaxGradBF16 is AttentionSoftmaxGrad with p (as
// AttentionSoftmaxBF16 wrote it) and ds in bfloat16, dp float32: each ds
// computed in float32 from the bfloat16 p, then rounded to nearest even.
// ds must not overlap dp.
func (k *Set) AttentionSoftmaxGradBF16(s *cuda.Stream, ds, p, dp cuda.DevicePtr, n, t int, scale float32) error {
	return k.softmaxLaunch(s, kernelAttnSoftmaxGradBF16, kernelAttnSoftmaxGrad4BF16, vec4(t, 16, dp) && vec4(t, 8, ds, p), n, t,
		new(cuda.Args).Ptr(ds).Ptr(p).Ptr(dp).U64(uint64(n)).U64(uint64(t)).F32(scale))
}

// HeadLayout describes where the heads of an attention layer lie in a
// row-major activation of batch·seq rows of LD elements (float32, or
// bfloat16 for the launchers that say so): head k of row
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

// AttentionSplitHeadsBF16 is AttentionSplitHeads into bfloat16 (rounded to
// nearest even), for GEMMs with bfloat16 inputs.
func (k *Set) AttentionSplitHeadsBF16(s *cuda.Stream, dst, src cuda.DevicePtr, l HeadLayout) error {
	return k.headKernel(s, kernelAttnSplitHeadsBF16, dst, src, l)
}

// AttentionSplitHeadsFromBF16 is AttentionSplitHeads from a bfloat16 src
// into float32 dst (exact).
func (k *Set) AttentionSplitHeadsFromBF16(s *cuda.Stream, dst, src cuda.DevicePtr, l HeadLayout) error {
	return k.headKernel(s, kernelAttnSplitFromBF16, dst, src, l)
}

// AttentionSplitHeadsBF16FromBF16 is AttentionSplitHeads with src and dst
// bfloat16: an exact copy, but that every NaN becomes 0x7fff.
func (k *Set) AttentionSplitHeadsBF16FromBF16(s *cuda.Stream, dst, src cuda.DevicePtr, l HeadLayout) error {
	return k.headKernel(s, kernelAttnSplitBF16ToBF16, dst, src, l)
}

// AttentionMergeHeads is the inverse of AttentionSplitHeads: the packed
// heads of src go to the columns l names in dst; dst's other columns are
// not written.
func (k *Set) AttentionMergeHeads(s *cuda.Stream, dst, src cuda.DevicePtr, l HeadLayout) error {
	return k.headKernel(s, kernelAttnMergeHeads, dst, src, l)
}
