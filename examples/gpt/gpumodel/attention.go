package gpumodel

import (
	"errors"
	"fmt"
	"math"

	"github.com/distopt/distopt/internal/cublaslt"
	"github.com/distopt/distopt/internal/cuda"
	"github.com/distopt/distopt/internal/kernels"
)

// attention runs causal multi-head attention (model.Attention and
// AttentionBackward) as strided-batched cuBLASLt GEMMs around the kernels
// of internal/kernels/attention.cu, on the float32 activations of the
// model: qkv [batch·seq, 3h] (queries, keys, values side by side, head k
// in columns [k·d, (k+1)·d) of each), y [batch·seq, h], and the
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
// and head, many more thread blocks per call). The packed layout is the
// model's: its copies move little next to the seq x seq matrices, and the
// GEMMs with M = d, which in place run one batch element at a time with
// few thread blocks, fill the GPU.
//
// The GEMMs compute whole seq x seq matrices (the causal half above the
// diagonal is computed and then zeroed by the softmax kernels, which read
// only the lower half): twice the useful FLOPs, but every GEMM is one
// large regular call.
//
// Precision: the model uses cublaslt.Compute32FFastTF32, the inputs of
// every GEMM rounded to TF32 (relative error 2^-11) with FP32
// accumulation. The GEMMs of attention are bound by the memory traffic of
// the seq x seq matrices, so TF32 runs close to the speed BF16 inputs
// would, without conversion kernels or bfloat16 copies, and its error
// (3e-4 to 5e-4 relative, measured against the float64 model by
// TestAttentionMatchesModel on the H200) is far below the FP8 rounding of
// the linear layers around it. Compute32F (exact FP32 products) is the
// reference mode that the test checks to 1e-5.
type attention struct {
	k                          *kernels.Set
	lt                         *cublaslt.Handle
	layout                     attnLayout
	ws                         cuda.DevicePtr
	wsSize                     int
	batch, seq, h, heads, d    int
	scale                      float32
	scores, pv, dp, dv, dq, dk *cublaslt.Plan
	q, kk, v, o                cuda.DevicePtr // packed heads [batch·heads, seq, d] (attnPacked)
}

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
// width h in heads heads, with the given compute type (Compute32F or
// Compute32FFastTF32) and layout, and allocates the scratch the layout
// needs (four packed buffers of batch·seq·h float32, and the cuBLASLt
// workspace). It fails with cublaslt.ErrNoLibrary where cuBLASLt
// cannot be opened.
func newAttention(k *kernels.Set, batch, seq, h, heads int, compute cublaslt.ComputeType, layout attnLayout) (*attention, error) {
	if batch < 1 || seq < 1 || heads < 1 || h < 1 || h%heads != 0 {
		return nil, fmt.Errorf("gpumodel: attention over batch %d x seq %d, width %d in %d heads: sizes must be positive, heads must divide the width", batch, seq, h, heads)
	}
	lib, err := cublaslt.Default()
	if err != nil {
		return nil, err
	}
	a := &attention{k: k, layout: layout, batch: batch, seq: seq, h: h, heads: heads, d: h / heads}
	a.scale = attnScaleFor(a.d)
	if a.lt, err = lib.NewHandle(k.Device()); err != nil {
		return nil, err
	}
	if err := a.plan(compute); err != nil {
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

// plan creates the six plans, the workspace the largest needs and, for the
// packed layout, the four head buffers.
func (a *attention) plan(compute cublaslt.ComputeType) error {
	T, d, h := a.seq, a.d, a.h
	batch := a.heads // matrices per GEMM call
	// head(w, part) is the column-major d x T view of the heads: in place,
	// in a row-major activation of width w (3h for qkv and dqkv, h for y
	// and dy), part 0, 1, 2 for q, k, v; packed, in a [batch·heads, T, d]
	// buffer.
	head := func(w, part int) cublaslt.Matrix {
		return cublaslt.Matrix{Type: cublaslt.R32F, Rows: d, Cols: T, LD: w, Batch: batch, Stride: int64(d),
			Align: alignOf(4*d, 4*w, 4*T*w, 4*part*h)}
	}
	if a.layout == attnPacked {
		batch = a.batch * a.heads
		head = func(int, int) cublaslt.Matrix {
			return cublaslt.Matrix{Type: cublaslt.R32F, Rows: d, Cols: T, LD: d, Batch: batch, Stride: int64(T) * int64(d),
				Align: alignOf(4*d, 4*T*d)}
		}
	}
	square := cublaslt.Matrix{Type: cublaslt.R32F, Rows: T, Cols: T, LD: T, Batch: batch, Stride: int64(T) * int64(T),
		Align: alignOf(4*T, 4*T*T)}
	spec := func(ta, tb cublaslt.Op, A, B, D cublaslt.Matrix) cublaslt.Spec {
		return cublaslt.Spec{TransA: ta, TransB: tb, A: A, B: B, C: D, D: D, Compute: compute}
	}
	N, T_ := cublaslt.OpN, cublaslt.OpT
	specs := []struct {
		dst  **cublaslt.Plan
		spec cublaslt.Spec
	}{
		{&a.scores, spec(T_, N, head(3*h, 1), head(3*h, 0), square)},
		{&a.pv, spec(N, N, head(3*h, 2), square, head(h, 0))},
		{&a.dp, spec(T_, N, head(3*h, 2), head(h, 0), square)},
		{&a.dv, spec(N, T_, head(h, 0), square, head(3*h, 2))},
		{&a.dq, spec(N, N, head(3*h, 1), square, head(3*h, 0))},
		{&a.dk, spec(N, T_, head(3*h, 0), square, head(3*h, 1))},
	}
	for _, s := range specs {
		p, err := a.lt.NewPlan(s.spec, attnWorkspace, 0, 1)
		if err != nil {
			return fmt.Errorf("gpumodel: attention: %w", err)
		}
		*s.dst = p
		a.wsSize = max(a.wsSize, p.Workspace())
	}
	a.wsSize = max(a.wsSize, 256)
	var err error
	dev := a.k.Device()
	if a.ws, err = dev.Alloc(a.wsSize); err != nil {
		return err
	}
	if a.layout == attnPacked {
		for _, p := range []*cuda.DevicePtr{&a.q, &a.kk, &a.v, &a.o} {
			if *p, err = dev.Alloc(4 * a.batch * T * h); err != nil {
				return err
			}
		}
	}
	return nil
}

// attnScaleFor is the score scale 1/sqrt(d) in float32, as attnScale.
func attnScaleFor(d int) float32 { return float32(1 / math.Sqrt(float64(d))) }

// The compute type and layout of the model's attention (see attention).
const (
	attnCompute = cublaslt.Compute32FFastTF32
	attnLayoutM = attnPacked
)

// close releases the plans, the buffers and the handle; nil-safe.
func (a *attention) close() error {
	if a == nil {
		return nil
	}
	var errs []error
	for _, p := range []*cublaslt.Plan{a.scores, a.pv, a.dp, a.dv, a.dq, a.dk} {
		if p != nil {
			errs = append(errs, p.Destroy())
		}
	}
	for _, p := range []cuda.DevicePtr{a.ws, a.q, a.kk, a.v, a.o} {
		if p != 0 {
			errs = append(errs, a.k.Device().Free(p))
		}
	}
	if a.lt != nil {
		errs = append(errs, a.lt.Destroy())
	}
	*a = attention{}
	return errors.Join(errs...)
}

// run queues plan p: once for the packed layout, else once per batch
// element b with the operands advanced by b times their per-element step
// (in float32 elements).
func (a *attention) run(s *cuda.Stream, p *cublaslt.Plan, A, B, D cuda.DevicePtr, stepA, stepB, stepD int) error {
	calls := a.batch
	if a.layout == attnPacked {
		calls = 1
	}
	for b := range calls {
		args := &cublaslt.Args{A: A.Add(4 * b * stepA), B: B.Add(4 * b * stepB), Alpha: 1,
			Workspace: a.ws, WorkspaceSize: a.wsSize}
		args.D = D.Add(4 * b * stepD)
		args.C = args.D
		if err := p.Run(s, args); err != nil {
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

// split copies, for the packed layout, the parts of qkv named (0, 1, 2 for
// q, k, v) into a.q, a.kk, a.v.
func (a *attention) split(s *cuda.Stream, qkv cuda.DevicePtr, parts ...int) error {
	dst := []cuda.DevicePtr{a.q, a.kk, a.v}
	for _, p := range parts {
		if err := a.k.AttentionSplitHeads(s, dst[p], qkv, a.headsAt(3*a.h, p*a.h)); err != nil {
			return err
		}
	}
	return nil
}

// operands returns where the GEMMs read q, k, v of qkv and write y: the
// packed buffers, or views into the activations.
func (a *attention) operands(qkv, y cuda.DevicePtr) (q, k, v, out cuda.DevicePtr) {
	if a.layout == attnPacked {
		return a.q, a.kk, a.v, a.o
	}
	return qkv, qkv.Add(4 * a.h), qkv.Add(8 * a.h), y
}

// forward queues y [batch·seq, h] = causal softmax(q·kᵀ·scale)·v per head
// from qkv, leaving the probabilities in p [batch, heads, seq, seq] (which
// first holds the scores).
func (a *attention) forward(s *cuda.Stream, y, p, qkv cuda.DevicePtr) error {
	if err := checkAligned(y, p, qkv); err != nil {
		return err
	}
	T, h := a.seq, a.h
	rowsQKV, sq := T*3*h, a.heads*T*T
	if a.layout == attnPacked {
		if err := a.split(s, qkv, 0, 1, 2); err != nil {
			return err
		}
	}
	q, k, v, out := a.operands(qkv, y)
	if err := a.run(s, a.scores, k, q, p, rowsQKV, rowsQKV, sq); err != nil {
		return err
	}
	if err := a.k.AttentionSoftmax(s, p, p, a.batch*a.heads, T, a.scale); err != nil {
		return err
	}
	if err := a.run(s, a.pv, v, p, out, rowsQKV, sq, T*h); err != nil {
		return err
	}
	if a.layout == attnPacked {
		return a.k.AttentionMergeHeads(s, y, a.o, a.headsAt(h, 0))
	}
	return nil
}

// backward queues dqkv [batch·seq, 3h] (overwritten) from dy [batch·seq,
// h], forward's p and qkv, with ds [batch, heads, seq, seq] as scratch (it
// ends holding the gradient of the scores). The packed layout copies the
// heads of qkv again (the scratch is shared by every layer) and reuses its
// buffers for the gradients as they free up: dv in v after dP, dq in the
// copy of dy after dV, dk in v after dv is merged.
func (a *attention) backward(s *cuda.Stream, dqkv, ds, dy, p, qkv cuda.DevicePtr) error {
	if err := checkAligned(dqkv, ds, dy, p, qkv); err != nil {
		return err
	}
	T, h := a.seq, a.h
	rowsQKV, rowsY, sq := T*3*h, T*h, a.heads*T*T
	q, k, v, g := a.operands(qkv, dy)
	dq, dk, dv := dqkv, dqkv.Add(4*h), dqkv.Add(8*h)
	merge := func(src cuda.DevicePtr, part int) error { return nil }
	if a.layout == attnPacked {
		if err := a.split(s, qkv, 0, 1, 2); err != nil {
			return err
		}
		if err := a.k.AttentionSplitHeads(s, a.o, dy, a.headsAt(h, 0)); err != nil {
			return err
		}
		dq, dk, dv = a.o, a.v, a.v
		merge = func(src cuda.DevicePtr, part int) error {
			return a.k.AttentionMergeHeads(s, dqkv, src, a.headsAt(3*h, part*h))
		}
	}
	steps := []func() error{
		func() error { return a.run(s, a.dp, v, g, ds, rowsQKV, rowsY, sq) },
		func() error { return a.run(s, a.dv, g, p, dv, rowsY, sq, rowsQKV) },
		func() error { return merge(dv, 2) },
		func() error { return a.k.AttentionSoftmaxGrad(s, ds, p, ds, a.batch*a.heads, T, a.scale) },
		func() error { return a.run(s, a.dq, k, ds, dq, rowsQKV, sq, rowsQKV) },
		func() error { return merge(dq, 0) },
		func() error { return a.run(s, a.dk, q, ds, dk, rowsQKV, sq, rowsQKV) },
		func() error { return merge(dk, 1) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
