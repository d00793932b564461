package gpumodel

import (
	"errors"
	"fmt"
	"math"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/cuda"
	"github.com/distopt/distopt/examples/gpt/cudnn"
	"github.com/distopt/distopt/examples/gpt/kernels"
	"github.com/distopt/distopt/gemm"
)

// attention runs causal multi-head attention (model.Attention and
// AttentionBackward) as strided-batched cuBLASLt GEMMs around the kernels
// of examples/gpt/kernels/attention.cu, on the activations of the model: qkv
// [batch·seq, 3h] (queries, keys, values side by side, head k in columns
// [k·d, (k+1)·d) of each; float32, or bfloat16 as the model keeps it:
// setQKVBF16), y [batch·seq, h] and its gradient (float32), and the
// probabilities p [batch, heads, seq, seq] kept for the backward pass.
//
// The six GEMMs of a forward and backward pass, per (batch, head), with Xc
// the column-major d x seq view of a row-major seq x d matrix X:
//
//	scores  S  = Q·Kᵀ    Sᵀ  = Kcᵀ·Qc   (TN, M = N = seq, K = d)
//	output  Y  = P·V     Yᵀ  = Vc·Pc    (NN, M = d, N = K = seq)
//	dP      dP = dY·Vᵀ   dPᵀ = Vcᵀ·dYc  (TN)
//	dV      dV = Pᵀ·dY   dVᵀ = dYc·Pcᵀ  (NT)
//	dQ      dQ = dS·K    dQᵀ = Kc·dSc   (NN)
//	dK      dK = dSᵀ·Q   dKᵀ = Qc·dScᵀ  (NT)
//
// Two layouts of the heads (attnLayout): read in place from the
// activations (each head a view of leading dimension 3h or h, heads d
// apart: one GEMM per batch element), or copied first into a packed
// [batch·heads, seq, d] scratch (kernels.AttentionSplitHeads, and
// AttentionMergeHeads for the outputs: one GEMM for every batch element
// and head). The packed layout is the model's: a fixed six GEMM calls per
// layer whatever the batch, and the only one bfloat16 can use; its copies
// move little next to the seq x seq matrices. (On the H200 the two ran
// within 10% of each other at the 124M and 1.3B shapes.)
//
// The GEMMs compute whole seq x seq matrices (the causal half above the
// diagonal is computed and then zeroed by the softmax kernels, which read
// only the lower half): twice the useful FLOPs, but every GEMM is one
// large regular call.
//
// Precision (attnPrecision): with attnTF32, the model's, every GEMM reads
// float32 data rounded to TF32 (relative error 2^-11) and accumulates in
// FP32; scores, probabilities and gradients stay float32. Its error against
// the float64 model is 3e-4 to 5e-4 relative (TestAttentionMatchesModel on
// the H200), far below the FP8 rounding of the linear layers around it.
// attnFP32 (exact FP32 products) is the reference mode, checked to 1e-5.
// attnBF16 (packed layout only) copies q, k, v and dy to bfloat16 and keeps
// the probabilities and the scores' gradient in bfloat16 (the scores and
// dP stay float32, the GEMMs accumulate in FP32): fewer bytes of the
// seq x seq matrices that bound these GEMMs, and BF16 tensor-core speed, at
// bfloat16's rounding (2^-9): errors up to 4e-3 relative against the
// float64 model, still below the FP8 of the linear layers. It needs
// 1.5·batch·heads·seq² float32 more scratch. Forward and backward, warm,
// on one H200: 1.77 ms against TF32's 1.99 at the 124M shape (B8, T1024),
// 3.20 against 3.91 ms at the 1.3B shape (B4, T2048); the GEMM path of the
// model (Options.Attention AttentionGEMM) runs in TF32.
//
// attnFlash (flash.go, AttentionFlash: the model's default) replaces the six GEMMs and
// the softmax kernels by the fused kernels of examples/gpt/kernels/flash.cu:
// the same bfloat16 roundings as attnBF16 (q, k, v, dy, p, ds), no
// seq x seq matrix in memory, and per layer the bfloat16 output and a
// logsumexp per row kept instead of the probabilities.
type attention struct {
	k                          *kernels.Set
	lt                         *gemm.Dense
	prec                       attnPrecision
	layout                     attnLayout
	ws                         cuda.DevicePtr
	wsSize                     int
	batch, seq, h, heads, d    int
	scale                      float32
	scores, pv, dp, dv, dq, dk *gemm.DensePlan
	// Packed layout: the heads of q, k, v and dy (or of the output
	// gradients) as [batch·heads, seq, d], float32 or bfloat16.
	q, kk, v, o cuda.DevicePtr
	// attnBF16: the float32 GEMM outputs [batch·heads, seq, d], the
	// float32 scores [batch, heads, seq, seq] and the bfloat16 gradient of
	// the scores.
	out, sbuf, ds16 cuda.DevicePtr
	// attnFlash: the per-row statistic of the backward pass (the bfloat16
	// output gradient goes to o).
	dsum cuda.DevicePtr
	// qkv16: forward and backward read qkv in bfloat16 (the model's kept
	// linear output, setQKVBF16) instead of float32.
	qkv16 bool
	// attnCuDNN: cuDNN's plans (the output gradient and dqkv are the
	// model's bfloat16 buffers), and why they are not the repeatable form
	// if cuDNN refused it (empty otherwise).
	dnn     *cudnn.Attention
	dnnNote string
}

// attnPrecision is the number format of attention's GEMMs (see attention).
type attnPrecision int

const (
	attnTF32  attnPrecision = iota // float32 data, TF32 products, FP32 sums
	attnFP32                       // float32 data and products
	attnBF16                       // bfloat16 q, k, v, dy, p, ds; float32 scores, dP and sums
	attnFlash                      // fused kernels (flash.go): bfloat16 q, k, v, dy; no probabilities kept
	attnCuDNN                      // cuDNN's fused attention (cudnnattn.go): as attnFlash, q, k, v read in place
)

func (p attnPrecision) String() string {
	return [...]string{"TF32", "FP32", "BF16", "flash", "cuDNN"}[p]
}

// fused reports whether p keeps a bfloat16 output and a statistic per row
// instead of the probabilities, and needs no score-gradient scratch.
func (p attnPrecision) fused() bool { return p == attnFlash || p == attnCuDNN }

// attnLayout is where the GEMMs of attention read the heads.
type attnLayout int

const (
	// attnPacked copies the heads into [batch·heads, seq, d] scratch
	// buffers: one GEMM per product.
	attnPacked attnLayout = iota
	// attnInPlace reads them where they are: one GEMM per batch element.
	attnInPlace
)

func (l attnLayout) String() string {
	if l == attnPacked {
		return "packed"
	}
	return "in-place"
}

// attnWorkspace bounds the cuBLASLt workspace the heuristic may ask for.
const attnWorkspace = 8 << 20

// attnBaseAlign is the alignment newAttention's plans assume of every
// buffer handed to forward and backward (cuMemAlloc gives 256 bytes).
const attnBaseAlign = 256

// newAttention plans the GEMMs of attention for batch x seq tokens of
// width h in heads heads, in the given precision and layout, and allocates
// the scratch they need (the cuBLASLt workspace; packed: four buffers of
// batch·seq·h elements; attnBF16 also one of batch·seq·h float32 and the
// float32 scores and bfloat16 score gradients, batch·heads·seq² each). It
// fails with an error matching gemm.ErrUnavailable where cuBLASLt cannot
// be opened, and with one matching gemm.ErrShape where the library has no
// kernel for a product.
func newAttention(k *kernels.Set, batch, seq, h, heads int, prec attnPrecision, layout attnLayout) (*attention, error) {
	if batch < 1 || seq < 1 || heads < 1 || h < 1 || h%heads != 0 {
		return nil, fmt.Errorf("gpumodel: attention over batch %d x seq %d, width %d in %d heads: sizes must be positive, heads must divide the width", batch, seq, h, heads)
	}
	if (prec == attnBF16 || prec == attnFlash) && layout != attnPacked {
		return nil, fmt.Errorf("gpumodel: attention in %v needs the packed layout", prec)
	}
	switch prec {
	case attnFlash:
		return newFlashAttention(k, batch, seq, h, heads)
	case attnCuDNN:
		return newCuDNNAttention(k, batch, seq, h, heads)
	}
	lt, err := gemm.NewDense(k.Device())
	if err != nil {
		return nil, err
	}
	a := &attention{k: k, lt: lt, prec: prec, layout: layout, batch: batch, seq: seq, h: h, heads: heads, d: h / heads}
	a.scale = attnScaleFor(a.d)
	if err := a.plan(); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// alignOf returns the largest power of two up to attnBaseAlign that
// divides every byte offset given.
func alignOf(offsets ...int) int {
	al := attnBaseAlign
	for _, o := range offsets {
		for o%al != 0 {
			al /= 2
		}
	}
	return al
}

// plan creates the six plans, the workspace the largest needs and the
// scratch of the layout and precision.
func (a *attention) plan() error {
	T, d, h := a.seq, a.d, a.h
	batch, elem, inType := a.heads, 4, buffer.Float32 // matrices per GEMM call; GEMM input element
	if a.prec == attnBF16 {
		elem, inType = 2, buffer.BFloat16
	}
	// in(w, part) and out(w, part) are the column-major d x T views of the
	// heads that the GEMMs read and write: in place, in a row-major
	// activation of width w (3h for qkv and dqkv, h for y and dy), part 0,
	// 1, 2 for q, k, v; packed, in a [batch·heads, T, d] buffer.
	in := func(w, part int) gemm.Matrix {
		return gemm.Matrix{Type: buffer.Float32, Rows: d, Cols: T, LD: w, Batch: batch, Stride: int64(d),
			Align: alignOf(4*d, 4*w, 4*T*w, 4*part*h)}
	}
	out := in
	if a.layout == attnPacked {
		batch = a.batch * a.heads
		packed := func(t buffer.DType, size int) gemm.Matrix {
			return gemm.Matrix{Type: t, Rows: d, Cols: T, LD: d, Batch: batch, Stride: int64(T) * int64(d),
				Align: alignOf(size*d, size*T*d)}
		}
		in = func(int, int) gemm.Matrix { return packed(inType, elem) }
		out = func(int, int) gemm.Matrix { return packed(buffer.Float32, 4) }
	}
	// The seq x seq matrices: scores and dP as GEMM outputs (float32), p
	// and ds as GEMM inputs.
	square := func(t buffer.DType, size int) gemm.Matrix {
		return gemm.Matrix{Type: t, Rows: T, Cols: T, LD: T, Batch: batch, Stride: int64(T) * int64(T),
			Align: alignOf(size*T, size*T*T)}
	}
	sqOut, sqIn := square(buffer.Float32, 4), square(inType, elem)
	spec := func(ta, tb bool, A, B, D gemm.Matrix) gemm.DenseSpec {
		return gemm.DenseSpec{TransA: ta, TransB: tb, A: A, B: B, D: D, TF32: a.prec == attnTF32}
	}
	N, T_ := false, true
	specs := []struct {
		dst  **gemm.DensePlan
		spec gemm.DenseSpec
	}{
		{&a.scores, spec(T_, N, in(3*h, 1), in(3*h, 0), sqOut)},
		{&a.pv, spec(N, N, in(3*h, 2), sqIn, out(h, 0))},
		{&a.dp, spec(T_, N, in(3*h, 2), in(h, 0), sqOut)},
		{&a.dv, spec(N, T_, in(h, 0), sqIn, out(3*h, 2))},
		{&a.dq, spec(N, N, in(3*h, 1), sqIn, out(3*h, 0))},
		{&a.dk, spec(N, T_, in(3*h, 0), sqIn, out(3*h, 1))},
	}
	for _, s := range specs {
		p, err := a.lt.Plan(s.spec, attnWorkspace)
		if err != nil {
			return fmt.Errorf("gpumodel: attention: %w", err)
		}
		*s.dst = p
		a.wsSize = max(a.wsSize, p.Workspace())
	}
	// The workspace is always the bound the plans were made under, so that
	// the model's memory is a function of the shapes (PredictMemory).
	a.wsSize = attnWorkspace
	return a.allocScratch(elem)
}

// attnScratchBytes is the device memory newAttention allocates for these
// shapes, precision and layout: the workspace and the buffers of
// allocScratch.
func attnScratchBytes(batch, seq, h, heads int, prec attnPrecision, layout attnLayout) int {
	n, sq := batch*seq*h, batch*heads*seq*seq
	switch prec {
	case attnFlash:
		return flashScratchBytes(batch, seq, h, heads)
	case attnCuDNN:
		return cudnnScratchBytes(batch, seq, h, heads)
	}
	elem := 4
	if prec == attnBF16 {
		elem = 2
	}
	b := attnWorkspace
	if layout == attnPacked {
		b += 4 * elem * n
	}
	if prec == attnBF16 {
		b += 4*n + 4*sq + 2*sq
	}
	return b
}

// allocScratch allocates the workspace and the buffers of the layout and
// precision (elem bytes per GEMM input element).
func (a *attention) allocScratch(elem int) error {
	n, sq := a.batch*a.seq*a.h, a.batch*a.heads*a.seq*a.seq
	var err error
	alloc := func(p *cuda.DevicePtr, bytes int) {
		if err == nil {
			*p, err = a.k.Device().Alloc(bytes)
		}
	}
	alloc(&a.ws, a.wsSize)
	if a.layout == attnPacked {
		for _, p := range []*cuda.DevicePtr{&a.q, &a.kk, &a.v, &a.o} {
			alloc(p, elem*n)
		}
	}
	if a.prec == attnBF16 {
		alloc(&a.out, 4*n)
		alloc(&a.sbuf, 4*sq)
		alloc(&a.ds16, 2*sq)
	}
	return err
}

// attnScaleFor is the score scale 1/sqrt(d) in float32, as attnScale.
func attnScaleFor(d int) float32 { return float32(1 / math.Sqrt(float64(d))) }

// The precision of the model's attention with AttentionGEMM, and the
// layout of its heads (see attention).
const (
	attnPrecisionM = attnTF32
	attnLayoutM    = attnPacked
)

// close releases the plans, the buffers and the handle; nil-safe.
func (a *attention) close() error {
	if a == nil {
		return nil
	}
	var errs []error
	for _, p := range []*gemm.DensePlan{a.scores, a.pv, a.dp, a.dv, a.dq, a.dk} {
		if p != nil {
			errs = append(errs, p.Destroy())
		}
	}
	for _, p := range []cuda.DevicePtr{a.ws, a.q, a.kk, a.v, a.o, a.out, a.sbuf, a.ds16, a.dsum} {
		if p != 0 {
			errs = append(errs, a.k.Device().Free(p))
		}
	}
	if a.lt != nil {
		errs = append(errs, a.lt.Close())
	}
	errs = append(errs, a.dnn.Close())
	*a = attention{}
	return errors.Join(errs...)
}

// run queues plan p: once for the packed layout, else once per batch
// element b with the operands advanced by b times their per-element step
// (in float32 elements).
func (a *attention) run(s *cuda.Stream, p *gemm.DensePlan, A, B, D cuda.DevicePtr, stepA, stepB, stepD int) error {
	calls := a.batch
	if a.layout == attnPacked {
		calls = 1
	}
	for b := range calls {
		if err := p.Run(s, A.Add(4*b*stepA), B.Add(4*b*stepB), D.Add(4*b*stepD), a.ws, a.wsSize); err != nil {
			return fmt.Errorf("gpumodel: attention: %w", err)
		}
	}
	return nil
}

// checkAligned refuses buffers below the alignment the plans assume.
func checkAligned(ptrs ...cuda.DevicePtr) error {
	for _, p := range ptrs {
		if p%attnBaseAlign != 0 {
			return fmt.Errorf("gpumodel: attention: buffer %#x is not %d-byte aligned", uint64(p), attnBaseAlign)
		}
	}
	return nil
}

// headsAt returns the kernels' description of the heads of an activation
// of width w from column off.
func (a *attention) headsAt(w, off int) kernels.HeadLayout {
	return kernels.HeadLayout{Batch: a.batch, Seq: a.seq, Heads: a.heads, D: a.d, LD: w, Off: off}
}

// setQKVBF16 makes forward and backward read qkv in bfloat16, as the model
// keeps it (the GEMMs and fused kernels read the packed copies, widened to
// float32 for attnTF32 and attnFP32): packed layout only.
func (a *attention) setQKVBF16() error {
	if a.layout != attnPacked {
		return fmt.Errorf("gpumodel: attention on a bfloat16 qkv needs the packed layout, not %v", a.layout)
	}
	a.qkv16 = true
	return nil
}

// split copies, for the packed layout, the parts of qkv named (0, 1, 2 for
// q, k, v) into a.q, a.kk, a.v (in bfloat16 for attnBF16 and attnFlash).
func (a *attention) split(s *cuda.Stream, qkv cuda.DevicePtr, parts ...int) error {
	dst := []cuda.DevicePtr{a.q, a.kk, a.v}
	for _, p := range parts {
		if err := a.splitOne(s, dst[p], qkv, a.qkv16, a.headsAt(3*a.h, p*a.h)); err != nil {
			return err
		}
	}
	return nil
}

// splitOne copies the heads l names in src (bfloat16 if src16, else
// float32) into the packed dst, in the GEMMs' input format.
func (a *attention) splitOne(s *cuda.Stream, dst, src cuda.DevicePtr, src16 bool, l kernels.HeadLayout) error {
	bf := a.prec == attnBF16 || a.prec == attnFlash
	switch {
	case bf && src16:
		return a.k.AttentionSplitHeadsBF16FromBF16(s, dst, src, l)
	case bf:
		return a.k.AttentionSplitHeadsBF16(s, dst, src, l)
	case src16:
		return a.k.AttentionSplitHeadsFromBF16(s, dst, src, l)
	}
	return a.k.AttentionSplitHeads(s, dst, src, l)
}

// operands returns where the GEMMs read q, k, v of qkv and the fourth
// operand (y in forward, dy in backward): the packed buffers, or views into
// the activations.
func (a *attention) operands(qkv, y cuda.DevicePtr) (q, k, v, out cuda.DevicePtr) {
	if a.layout == attnPacked {
		return a.q, a.kk, a.v, a.o
	}
	return qkv, qkv.Add(4 * a.h), qkv.Add(8 * a.h), y
}

// forward queues y [batch·seq, h] = causal softmax(q·kᵀ·scale)·v per head
// from qkv, leaving the probabilities in p [batch, heads, seq, seq] (float32,
// which first holds the scores; for attnBF16 bfloat16 in p's first half,
// the scores in a.sbuf). attnCuDNN writes no y: its bfloat16 output stays
// in p, where attn.proj reads it (Model.attnOut).
func (a *attention) forward(s *cuda.Stream, y, p, qkv cuda.DevicePtr) error {
	if err := checkAligned(y, p, qkv); err != nil {
		return err
	}
	switch a.prec {
	case attnFlash:
		return a.flashForward(s, y, p, qkv)
	case attnCuDNN:
		return a.cudnnForward(s, p, qkv)
	}
	T, h := a.seq, a.h
	rowsQKV, sq := T*3*h, a.heads*T*T
	if a.layout == attnPacked {
		if err := a.split(s, qkv, 0, 1, 2); err != nil {
			return err
		}
	}
	q, k, v, out := a.operands(qkv, y)
	scores := p
	if a.prec == attnBF16 {
		scores, out = a.sbuf, a.out
	}
	if err := a.run(s, a.scores, k, q, scores, rowsQKV, rowsQKV, sq); err != nil {
		return err
	}
	softmax := a.k.AttentionSoftmax
	if a.prec == attnBF16 {
		softmax = a.k.AttentionSoftmaxBF16
	}
	if err := softmax(s, p, scores, a.batch*a.heads, T, a.scale); err != nil {
		return err
	}
	if err := a.run(s, a.pv, v, p, out, rowsQKV, sq, T*h); err != nil {
		return err
	}
	if a.layout == attnPacked {
		return a.k.AttentionMergeHeads(s, y, out, a.headsAt(h, 0))
	}
	return nil
}

// backward queues dqkv [batch·seq, 3h] (overwritten) from dy [batch·seq,
// h], forward's p and qkv, with ds [batch, heads, seq, seq] (float32) as
// scratch: it receives dP, then (but for attnBF16, whose score gradient
// goes to a.ds16) the gradient of the scores. The packed layout copies the
// heads of qkv again (the scratch is shared by every layer); in float32 it
// reuses the head buffers for the gradients as they free up (dv in v after
// dP, dq in the copy of dy after dV, dk in v after dv is merged), in
// bfloat16 the gradients go through a.out. attnCuDNN reads dy and writes
// dqkv in bfloat16 (cudnnLinear).
func (a *attention) backward(s *cuda.Stream, dqkv, ds, dy, p, qkv cuda.DevicePtr) error {
	switch a.prec {
	case attnFlash:
		return a.flashBackward(s, dqkv, dy, p, qkv)
	case attnCuDNN:
		return a.cudnnBackward(s, dqkv, dy, p, qkv)
	}
	if err := checkAligned(dqkv, ds, dy, p, qkv); err != nil {
		return err
	}
	T, h := a.seq, a.h
	rowsQKV, rowsY, sq := T*3*h, T*h, a.heads*T*T
	q, k, v, g := a.operands(qkv, dy)
	dq, dk, dv := dqkv, dqkv.Add(4*h), dqkv.Add(8*h)
	dsIn := ds // the score gradient as the last GEMMs read it
	merge := func(src cuda.DevicePtr, part int) error { return nil }
	softmaxGrad := a.k.AttentionSoftmaxGrad
	if a.layout == attnPacked {
		if err := a.split(s, qkv, 0, 1, 2); err != nil {
			return err
		}
		if err := a.splitOne(s, a.o, dy, false, a.headsAt(h, 0)); err != nil {
			return err
		}
		dq, dk, dv = a.o, a.v, a.v
		if a.prec == attnBF16 {
			dq, dk, dv, dsIn, softmaxGrad = a.out, a.out, a.out, a.ds16, a.k.AttentionSoftmaxGradBF16
		}
		merge = func(src cuda.DevicePtr, part int) error {
			return a.k.AttentionMergeHeads(s, dqkv, src, a.headsAt(3*h, part*h))
		}
	}
	steps := []func() error{
		func() error { return a.run(s, a.dp, v, g, ds, rowsQKV, rowsY, sq) },
		func() error { return a.run(s, a.dv, g, p, dv, rowsY, sq, rowsQKV) },
		func() error { return merge(dv, 2) },
		func() error { return softmaxGrad(s, dsIn, p, ds, a.batch*a.heads, T, a.scale) },
		func() error { return a.run(s, a.dq, k, dsIn, dq, rowsQKV, sq, rowsQKV) },
		func() error { return merge(dq, 0) },
		func() error { return a.run(s, a.dk, q, dsIn, dk, rowsQKV, sq, rowsQKV) },
		func() error { return merge(dk, 1) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
