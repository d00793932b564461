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
// AttentionBackward) as strided-batched cuBLASLt GEMMs around the softmax
// kernels of internal/kernels/attention.cu, on the float32 activations of
// the model: qkv [batch·seq, 3h] (queries, keys, values side by side, head
// k in columns [k·d, (k+1)·d) of each), y [batch·seq, h], and the
// probabilities p [batch, heads, seq, seq] kept for the backward pass.
//
// No layout shuffle is needed: each head is a column-major view of the
// row-major activations (leading dimension 3h or h), consecutive heads d
// elements apart, so one GEMM per batch element covers every head. The
// six GEMMs of a forward and backward pass, per (batch, head), with Xc the
// column-major d x seq view of a row-major seq x d matrix X:
//
//	scores  S  = Q·Kᵀ    Sᵀ  = Kcᵀ·Qc   (TN, M = N = seq, K = d)
//	output  Y  = P·V     Yᵀ  = Vc·Pc    (NN, M = d, N = K = seq)
//	dP      dP = dY·Vᵀ   dPᵀ = Vcᵀ·dYc  (TN)
//	dV      dV = Pᵀ·dY   dVᵀ = dYc·Pcᵀ  (NT)
//	dQ      dQ = dS·K    dQᵀ = Kc·dSc   (NN)
//	dK      dK = dSᵀ·Q   dKᵀ = Qc·dScᵀ  (NT)
//
// The GEMMs compute whole seq x seq matrices (the causal half above the
// diagonal is computed and then zeroed by the softmax kernels, which read
// only the lower half): twice the useful FLOPs, but every GEMM is one
// large regular call.
//
// Precision: the model uses cublaslt.Compute32FFastTF32, the inputs of
// every GEMM rounded to TF32 (relative error 2^-11) with FP32
// accumulation. The GEMMs of attention are memory-bound at these shapes
// (the seq x seq matrices dominate), so TF32 runs close to BF16 inputs'
// speed without conversion kernels or bfloat16 copies, and its error
// (about 1e-3 relative, measured against the float64 model by
// TestAttentionMatchesModel) is an order below the FP8 rounding of the
// linear layers around it. Compute32F (exact FP32 products) is the
// reference mode the test checks to 1e-5.
type attention struct {
	k                          *kernels.Set
	lt                         *cublaslt.Handle
	ws                         cuda.DevicePtr
	wsSize                     int
	batch, seq, h, heads, d    int
	scale                      float32
	scores, pv, dp, dv, dq, dk *cublaslt.Plan
}

// attnWorkspace bounds the cuBLASLt workspace the heuristic may ask for.
const attnWorkspace = 8 << 20

// attnBaseAlign is the alignment newAttention's plans assume of every
// buffer handed to forward and backward (cuMemAlloc gives 256 bytes).
const attnBaseAlign = 256

// newAttention plans the GEMMs of attention for batch x seq tokens of
// width h in heads heads, with the given compute type (Compute32F or
// Compute32FFastTF32). It fails with cublaslt.ErrNoLibrary where cuBLASLt
// cannot be opened.
func newAttention(k *kernels.Set, batch, seq, h, heads int, compute cublaslt.ComputeType) (*attention, error) {
	if batch < 1 || seq < 1 || heads < 1 || h < 1 || h%heads != 0 {
		return nil, fmt.Errorf("gpumodel: attention over batch %d x seq %d, width %d in %d heads: sizes must be positive, heads must divide the width", batch, seq, h, heads)
	}
	lib, err := cublaslt.Default()
	if err != nil {
		return nil, err
	}
	a := &attention{k: k, batch: batch, seq: seq, h: h, heads: heads, d: h / heads}
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

// plan creates the six plans and the workspace the largest needs.
func (a *attention) plan(compute cublaslt.ComputeType) error {
	T, d, h, H := a.seq, a.d, a.h, a.heads
	// Column-major d x T views of a row-major activation of width w
	// (3h for qkv and dqkv, h for y and dy); part is 0, 1, 2 for q, k, v.
	head := func(w int, parts ...int) cublaslt.Matrix {
		offs := []int{4 * d, 4 * w, 4 * T * w}
		for _, p := range parts {
			offs = append(offs, 4*p*h)
		}
		return cublaslt.Matrix{Type: cublaslt.R32F, Rows: d, Cols: T, LD: w, Batch: H, Stride: int64(d), Align: alignOf(offs...)}
	}
	square := cublaslt.Matrix{Type: cublaslt.R32F, Rows: T, Cols: T, LD: T, Batch: H, Stride: int64(T) * int64(T),
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
		{&a.pv, spec(N, N, head(3*h, 2), square, head(h))},
		{&a.dp, spec(T_, N, head(3*h, 2), head(h), square)},
		{&a.dv, spec(N, T_, head(h), square, head(3*h, 2))},
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
	var err error
	a.ws, err = a.k.Device().Alloc(max(a.wsSize, 256))
	return err
}

// attnScaleFor is the score scale 1/sqrt(d) in float32, as attnScale.
func attnScaleFor(d int) float32 { return float32(1 / math.Sqrt(float64(d))) }

// attnCompute is the compute type of the model's attention GEMMs (see
// attention).
const attnCompute = cublaslt.Compute32FFastTF32

// close releases the plans, the workspace and the handle; nil-safe.
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
	if a.ws != 0 {
		errs = append(errs, a.k.Device().Free(a.ws))
	}
	if a.lt != nil {
		errs = append(errs, a.lt.Destroy())
	}
	*a = attention{}
	return errors.Join(errs...)
}

// run queues plan p once per batch element b, the operands advanced by
// b times their per-element step in float32 elements.
func (a *attention) run(s *cuda.Stream, p *cublaslt.Plan, A, B, D cuda.DevicePtr, stepA, stepB, stepD int) error {
	for b := range a.batch {
		args := &cublaslt.Args{A: A.Add(4 * b * stepA), B: B.Add(4 * b * stepB), Alpha: 1,
			Workspace: a.ws, WorkspaceSize: max(a.wsSize, 256)}
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

// forward queues y [batch·seq, h] = causal softmax(q·kᵀ·scale)·v per head
// from qkv, leaving the probabilities in p [batch, heads, seq, seq] (which
// first holds the scores).
func (a *attention) forward(s *cuda.Stream, y, p, qkv cuda.DevicePtr) error {
	if err := checkAligned(y, p, qkv); err != nil {
		return err
	}
	T, h := a.seq, a.h
	rowsQKV, sq := T*3*h, a.heads*T*T
	if err := a.run(s, a.scores, qkv.Add(4*h), qkv, p, rowsQKV, rowsQKV, sq); err != nil {
		return err
	}
	if err := a.k.AttentionSoftmax(s, p, p, a.batch*a.heads, T, a.scale); err != nil {
		return err
	}
	return a.run(s, a.pv, qkv.Add(8*h), p, y, rowsQKV, sq, T*h)
}

// backward queues dqkv [batch·seq, 3h] (overwritten) from dy [batch·seq,
// h], forward's p and qkv, with ds [batch, heads, seq, seq] as scratch (it
// ends holding the gradient of the scores).
func (a *attention) backward(s *cuda.Stream, dqkv, ds, dy, p, qkv cuda.DevicePtr) error {
	if err := checkAligned(dqkv, ds, dy, p, qkv); err != nil {
		return err
	}
	T, h := a.seq, a.h
	rowsQKV, rowsY, sq := T*3*h, T*h, a.heads*T*T
	if err := a.run(s, a.dp, qkv.Add(8*h), dy, ds, rowsQKV, rowsY, sq); err != nil {
		return err
	}
	if err := a.run(s, a.dv, dy, p, dqkv.Add(8*h), rowsY, sq, rowsQKV); err != nil {
		return err
	}
	if err := a.k.AttentionSoftmaxGrad(s, ds, p, ds, a.batch*a.heads, T, a.scale); err != nil {
		return err
	}
	if err := a.run(s, a.dq, qkv.Add(4*h), ds, dqkv, rowsQKV, sq, rowsQKV); err != nil {
		return err
	}
	return a.run(s, a.dk, qkv, ds, dqkv.Add(4*h), rowsQKV, sq, rowsQKV)
}
