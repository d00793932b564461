package cudnn

import (
	"fmt"
	"math"
)

// Shape is the size of one attention call: Batch x Heads independent
// causal attentions over Seq tokens, heads of width D.
type Shape struct{ Batch, Heads, Seq, D int }

// String returns e.g. "B4 H16 T2048 D128".
func (s Shape) String() string { return fmt.Sprintf("B%d H%d T%d D%d", s.Batch, s.Heads, s.Seq, s.D) }

// Layout is where the tensors lie: for each, the strides in elements of
// its [batch, head, seq, d] dimensions (the last one must be 1). q, k and
// v share QKV's strides, each from its own base pointer; o and its
// gradient share O's; dq, dk and dv share Grad's. The softmax statistics
// are always packed [batch, head, seq].
type Layout struct {
	QKV, O, Grad [4]int64
}

// PackedLayout is every tensor packed [batch, head, seq, d].
func PackedLayout(s Shape) Layout {
	p := packed(s.dims())
	return Layout{QKV: p, O: p, Grad: p}
}

// RowLayout is the GPT's layout: q, k, v and their gradients are the
// thirds of a row-major [batch·seq, 3·heads·d] activation (head k of q in
// columns k·d to k·d + d - 1, k at heads·d further, v at 2·heads·d), o
// and its gradient a row-major [batch·seq, heads·d] one. No copy of a
// head is needed.
func RowLayout(s Shape) Layout {
	w := int64(s.Heads * s.D)
	qkv := [4]int64{int64(s.Seq) * 3 * w, int64(s.D), 3 * w, 1}
	return Layout{QKV: qkv, O: [4]int64{int64(s.Seq) * w, int64(s.D), w, 1}, Grad: qkv}
}

func (s Shape) dims() [4]int64 {
	return [4]int64{int64(s.Batch), int64(s.Heads), int64(s.Seq), int64(s.D)}
}

// The unique ids of the non-virtual tensors (the variant pack's keys).
const (
	uidQ int64 = iota + 1
	uidK
	uidV
	uidO
	uidStats
	uidDO
	uidDQ
	uidDK
	uidDV
	uidScale
	uidNegInf
	uidOne
	uidSoftmaxSum // backward: the row sums of dO∘O, float32 [batch, head, seq]
	uidDQAccum    // backward: dQ accumulated in float32, packed [batch, head, seq, d]
)

// swapLast2 exchanges the last two entries: the strides of Kᵀ from K's.
func swapLast2(a [4]int64) [4]int64 { return [4]int64{a[0], a[1], a[3], a[2]} }

// maskValue is the score the causal mask puts above the diagonal, as
// cudnn-frontend picks it for the library version (attn::score_modifiers::
// get_negative_inf_value): before cuDNN 9.10 the lowest finite float32
// ("older cuDNN version prefers lowest for softmax mask"), -Inf from 9.10.
// The two give the same attention; the engines of each version are built
// and tested against their own, and an -Inf row maximum in an online
// softmax gives exp(-Inf - -Inf) = NaN.
func maskValue(version int) float32 {
	if version < 91000 {
		return -math.MaxFloat32
	}
	return float32(math.Inf(-1))
}

// sdpaTensors adds the inputs both passes read: q, kᵀ (k's memory seen as
// [batch, head, d, seq], as the backend's first matmul takes it), the
// statistics and the scalars (mask: maskValue).
func sdpaTensors(b *builder, s Shape, l Layout, scale, mask float32) (q, kt, stats, sc, negInf *tensor) {
	B, H, T, D := int64(s.Batch), int64(s.Heads), int64(s.Seq), int64(s.D)
	q = b.io(uidQ, "q", dtBF16, s.dims(), l.QKV)
	kt = b.io(uidK, "kT", dtBF16, [4]int64{B, H, D, T}, swapLast2(l.QKV))
	stats = b.io(uidStats, "stats", dtFloat, [4]int64{B, H, T, 1}, [4]int64{H * T, T, 1, 1})
	sc = b.scalar(uidScale, "scale", scale)
	negInf = b.scalar(uidNegInf, "-inf", mask)
	return q, kt, stats, sc, negInf
}

// causalMask appends the top-left causal mask: score (i, j) is kept where
// row i >= column j and becomes -inf elsewhere (GEN_INDEX on dims 2 and 3,
// CMP_GE, BINARY_SELECT); negInf holds maskValue.
func (b *builder) causalMask(s, negInf *tensor) *tensor {
	row := b.genIndex("gen_row_index", 2, b.virt("row", dtInt32, s.dims), s)
	col := b.genIndex("gen_col_index", 3, b.virt("col", dtInt32, s.dims), s)
	keep := b.pointwise("row>=col", pwCmpGE, dtBoolean, b.virt("keep", dtBoolean, s.dims), row, col)
	return b.pointwise("binary_select", pwBinarySelect, dtFloat, b.virt("masked", dtFloat, s.dims), s, negInf, keep)
}

// forwardGraph is causal attention o = softmax(scale·q·kᵀ, masked)·v with
// the statistic stats = max + log(sum of exp) of every row (the log-sum-exp
// the backward pass needs), in the pattern of cuDNN's fused flash
// attention: bmm1, scale, mask, softmax (max, sub, exp, sum, log, add, div;
// the probabilities in bfloat16), bmm2.
func forwardGraph(s Shape, l Layout, scale, mask float32) *graph {
	b := newBuilder("sdpa_fwd")
	B, H, T := int64(s.Batch), int64(s.Heads), int64(s.Seq)
	q, kt, stats, sc, negInf := sdpaTensors(b, s, l, scale, mask)
	v := b.io(uidV, "v", dtBF16, s.dims(), l.QKV)
	o := b.io(uidO, "o", dtBF16, s.dims(), l.O)
	ss, rows := [4]int64{B, H, T, T}, [4]int64{B, H, T, 1}
	x := b.matmul("bmm1", b.virt("s", dtFloat, ss), q, kt)
	x = b.pointwise("attn_scale", pwMul, dtFloat, b.virt("s_scaled", dtFloat, ss), x, sc)
	x = b.causalMask(x, negInf)
	m := b.reduce("max", redMax, b.virt("max", dtFloat, rows), x)
	z := b.pointwise("sub", pwSub, dtFloat, b.virt("sub_m", dtFloat, ss), x, m)
	e := b.pointwise("exp", pwExp, dtFloat, b.virt("exp", dtFloat, ss), z)
	sum := b.reduce("sum", redAdd, b.virt("sum_exp", dtFloat, rows), e)
	lg := b.pointwise("log", pwLog, dtFloat, b.virt("log_sum", dtFloat, rows), sum)
	b.pointwise("add", pwAdd, dtFloat, stats, m, lg)
	p := b.pointwise("div", pwDiv, dtFloat, b.virt("p", dtBF16, ss), e, sum)
	b.matmul("bmm2", o, p, v)
	return b.g
}

// backwardGraph is the gradient of forwardGraph: dq, dk, dv from q, k, v,
// o, do and the statistics, in the pattern of cuDNN's fused flash
// attention backward. The row sums of do∘o go to a float32 buffer
// (softmax_sum); the probabilities are recomputed as exp(scale·q·kᵀ -
// stats) under the mask. dq takes one of the two forms cudnn-frontend
// emits: accumulated in float32 over the key blocks (dq_accum, then
// IDENTITY to bfloat16), or, repeatable, written by its product alone
// (matmul_dS_K into dQ), which makes the engine keep the score gradient
// in its workspace and reduce dq in a fixed order: the form the frontend
// takes for deterministic attention ("dP workspace").
func backwardGraph(s Shape, l Layout, scale, mask float32, repeatable bool) *graph {
	b := newBuilder("sdpa_bwd")
	B, H, T, D := int64(s.Batch), int64(s.Heads), int64(s.Seq), int64(s.D)
	q, kt, stats, sc, negInf := sdpaTensors(b, s, l, scale, mask)
	vt := b.io(uidV, "vT", dtBF16, [4]int64{B, H, D, T}, swapLast2(l.QKV))
	o := b.io(uidO, "o", dtBF16, s.dims(), l.O)
	do := b.io(uidDO, "dO", dtBF16, s.dims(), l.O)
	dq := b.io(uidDQ, "dQ", dtBF16, s.dims(), l.Grad)
	dk := b.io(uidDK, "dK", dtBF16, s.dims(), l.Grad)
	dv := b.io(uidDV, "dV", dtBF16, s.dims(), l.Grad)
	rows, ss := [4]int64{B, H, T, 1}, [4]int64{B, H, T, T}
	sum := b.io(uidSoftmaxSum, "softmax_sum", dtFloat, rows, [4]int64{H * T, T, 1, 1})
	one := b.scalar(uidOne, "one", 1)
	transposed := [4]int64{H * T * T, T * T, 1, T}

	prod := b.pointwise("mul_dO_O", pwMul, dtFloat, b.virt("dO*O", dtFloat, s.dims()), do, o)
	rs := b.reduce("reduce_dO_O", redAdd, b.virt("rowsum", dtFloat, rows), prod)
	b.pointwise("scale_dropout_inv", pwMul, dtFloat, sum, rs, one)

	x := b.matmul("matmul_Q_KT", b.virt("s", dtFloat, ss), q, kt)
	x = b.pointwise("mul_s_attn_scale", pwMul, dtFloat, b.virt("s_scaled", dtFloat, ss), x, sc)
	x = b.pointwise("sub_s_m", pwSub, dtFloat, b.virt("s_sub_stats", dtFloat, ss), x, stats)
	x = b.causalMask(x, negInf)
	p := b.pointwise("exp_s", pwExp, dtFloat, b.virt("p", dtFloat, ss), x)
	pt := b.reshape("reshape_p", b.virtStrided("pT", dtBF16, ss, transposed), p)
	b.matmul("matmul_pT_dO", dv, pt, do)

	dp := b.matmul("matmul_dO_VT", b.virt("dP", dtFloat, ss), do, vt)
	ds := b.pointwise("sub_dP_softmax_sum", pwSub, dtFloat, b.virt("dP-sum", dtFloat, ss), dp, sum)
	ds = b.pointwise("mul_dP_exp_s", pwMul, dtFloat, b.virt("dS_unscaled", dtFloat, ss), ds, p)
	ds = b.pointwise("mul_dS_attn_scale", pwMul, dtFloat, b.virt("dS", dtFloat, ss), ds, sc)
	dst := b.reshape("reshape_dS", b.virtStrided("dST", dtBF16, ss, transposed), ds)
	b.matmul("matmul_dST_Q", dk, dst, q)

	k := b.reshape("reshape_k", b.virtStrided("k", dtBF16, s.dims(), l.QKV), kt)
	if repeatable {
		b.matmul("matmul_dS_K", dq, ds, k)
		return b.g
	}
	dqAcc := b.io(uidDQAccum, "dQ_accum", dtFloat, s.dims(), packed(s.dims()))
	b.matmul("matmul_dS_K", dqAcc, ds, k)
	b.pointwise("identity_dQ", pwIdentity, dtFloat, dq, dqAcc)
	return b.g
}

// scoreGradBytes is the workspace the repeatable backward form needs
// beyond an engine's own for the bfloat16 score gradient of every head:
// batch·heads·seq·seq two-byte values, each sequence padded to 128: a
// bound at least as large as cudnn-frontend's own estimate of it (which
// pads to 64, or the keys to 128). The plan's actual workspace, at most
// this bound, is what the engine reports.
func scoreGradBytes(s Shape) int {
	t := (s.Seq + 127) / 128 * 128
	return 2 * s.Batch * s.Heads * t * t
}
